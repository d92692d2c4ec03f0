"""A container runtime's log file, decoded to the lines the container printed, as they are read.

Two formats, read from their emitters:

- Docker's ``json-file`` driver (moby ``daemon/logger/jsonfilelog/jsonlog/jsonlogbytes.go``, ``JSONLogs.MarshalJSONBuf``
  writes ``{"log":...,"stream":...,"attrs":...,"time":...}``, one object per line; ``jsonfilelog.go`` appends the
  message's newline to ``log`` only on its last part, so a line longer than the runtime's 16 KiB buffer arrives as
  several objects whose ``log`` has no newline until the last).
- The CRI format, kept by the kubelet's runtimes under ``/var/log/containers`` and by podman's ``k8s-file`` driver
  (kubernetes ``pkg/kubelet/kuberuntime/logs/logs.go``, ``parseCRILog``): ``<RFC3339Nano time> <stream> <tags>
  <text>``, the tags ``:``-separated, the first ``P`` (a partial line, continued by the next of its stream) or ``F``
  (the line's end).

A partial line is joined per stream (stdout's and stderr's parts interleave) and handed on at its end; one that never
ends is handed on cut at :data:`MAX_JOINED` characters. A line in neither form (a cut object, a line the runtime did
not write) is handed on as it is, so nothing is lost.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import PurePath

MAX_JOINED = 1 << 20
"""The most characters a partial line is joined to before it is handed on cut (the file tail's own line bound)."""

DOCKER_JSON = "docker json-file"
CRI = "CRI"
_DOCKER_NAME = re.compile(r"^([0-9a-f]{64})-json\.log(?:\.\d+)?$")
_CRI_NAME = re.compile(r"-[0-9a-f]{64}\.log$")
_CRI_LINE = re.compile(r"(\S+) (stdout|stderr) ([^ ]*) ?(.*)\Z", re.DOTALL)
# control characters a JSON string may carry escaped (\u001b): shown as "?" like the file tail's raw bytes
_CONTROL = {c: "?" for c in range(32) if c not in (9, 10)}
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f]")


def log_format(path: PurePath) -> str | None:
    """The runtime format of the file at ``path``, by the name its runtime gives it; ``None`` for a plain log.

    Docker: ``/var/lib/docker/containers/<id>/<id>-json.log`` (and its rotated ``.1``...); CRI:
    ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log``; podman's k8s-file:
    ``.../overlay-containers/<id>/userdata/ctr.log`` (written in the CRI form)."""
    name = path.name
    m = _DOCKER_NAME.match(name)
    if m and path.parent.name == m.group(1):
        return DOCKER_JSON
    if _CRI_NAME.search(name) or (name == "ctr.log" and path.parent.name == "userdata"):
        return CRI
    return None


class ContainerLogDecoder:
    """Decodes one container log file's lines (stateful: a partial line waits for the rest of it)."""

    def __init__(self, fmt: str) -> None:
        self.format = fmt
        self._pending: dict[str, list[str]] = {}
        self._sizes: dict[str, int] = {}

    def _join(self, stream: str, text: str, last: bool, out: list[str]) -> None:
        parts = self._pending.get(stream)
        if not parts:
            if last:  # the common case: a whole line in one record
                out.append(text)
                return
            parts = self._pending[stream] = []
        parts.append(text)
        size = self._sizes[stream] = self._sizes.get(stream, 0) + len(text)
        if last or size >= MAX_JOINED:
            out.append("".join(parts)[:MAX_JOINED])
            parts.clear()
            self._sizes[stream] = 0

    def feed(self, lines: Sequence[str]) -> list[str]:
        """The container's own lines the runtime's ``lines`` complete, in order."""
        out: list[str] = []
        if self.format == DOCKER_JSON:
            self._docker(lines, out)
        else:
            for line in lines:
                self._cri(line, out)
        if out and _CONTROL_RE.search(joined := "\n".join(out)):
            # a JSON string's escaped control characters (\u001b), shown as "?" as the file tail shows raw ones; a
            # decoded line holds no newline (the runtime cut there), so the join splits back to the same lines
            out = joined.translate(_CONTROL).split("\n")
        return out

    def _docker(self, lines: Sequence[str], out: list[str]) -> None:
        records = [line for line in lines if line]
        try:
            # one parse for the run (a C loop) rather than one per line; a run holding a line that is no object
            # (cut by the tail's line bound, written by something else) is read line by line
            objs = json.loads("[" + ",".join(records) + "]") if records else []
        except ValueError:
            objs = []
        if len(objs) != len(records):  # (a line of two objects parses as two)
            objs = [_loads(line) for line in records]
        for line, obj in zip(records, objs, strict=True):
            text = obj.get("log") if isinstance(obj, dict) else None
            if not isinstance(text, str):
                out.append(line)  # shown raw rather than lost
                continue
            last = text.endswith("\n")
            if last:
                text = text[:-2] if text.endswith("\r\n") else text[:-1]
            self._join(str(obj.get("stream", "")), text, last, out)

    def _cri(self, line: str, out: list[str]) -> None:
        m = _CRI_LINE.match(line)
        if m is None:
            if line:
                out.append(line)
            return
        _time, stream, tags, text = m.groups()
        # kubelet: a missing tag reads as full (the format before tags were added)
        self._join(stream, text, tags.split(":", 1)[0] != "P", out)


def _loads(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None
