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
        parts = self._pending.setdefault(stream, [])
        parts.append(text)
        size = self._sizes[stream] = self._sizes.get(stream, 0) + len(text)
        if last or size >= MAX_JOINED:
            out.append("".join(parts)[:MAX_JOINED].translate(_CONTROL))
            parts.clear()
            self._sizes[stream] = 0

    def feed(self, lines: Sequence[str]) -> list[str]:
        """The container's own lines the runtime's ``lines`` complete, in order."""
        out: list[str] = []
        for line in lines:
            if self.format == DOCKER_JSON:
                self._docker(line, out)
            else:
                self._cri(line, out)
        return out

    def _docker(self, line: str, out: list[str]) -> None:
        if not line.startswith("{"):
            if line:
                out.append(line)
            return
        try:
            obj = json.loads(line)
        except ValueError:
            out.append(line)  # a cut object (the tail's line bound): shown raw rather than lost
            return
        if not isinstance(obj, dict) or not isinstance(obj.get("log", ""), str):
            out.append(line)
            return
        text = obj.get("log", "")
        stream = str(obj.get("stream", ""))
        last = text.endswith("\n")
        self._join(stream, text[:-1] if last else text, last, out)

    def _cri(self, line: str, out: list[str]) -> None:
        m = _CRI_LINE.match(line)
        if m is None:
            if line:
                out.append(line)
            return
        _time, stream, tags, text = m.groups()
        # kubelet: a missing tag reads as full (the format before tags were added)
        self._join(stream, text, tags.split(":", 1)[0] != "P", out)
