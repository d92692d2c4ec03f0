"""Issue 23 item 10: ``ramp --url`` is checked (scheme, host, port range) before anything runs: one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from amdtop.cli.main import main
from amdtop.ramp.target import check_base_url

BAD = {
    "http://127.0.0.1:99999": "port '99999' is not a number in 1-65535",
    ":abc": "needs http:// or https://",
    "http://[::1": "the [ of an IPv6 host is never closed",
    "http://127.0.0.1:0": "port 0 is outside 1-65535",
    "http://127.0.0.1:abc": "port 'abc' is not a number",
    "127.0.0.1:8000": "needs http:// or https://",
    "ftp://127.0.0.1:21": "needs http:// or https://",
    "http://:8000": "names no host",
    "http://bad host:8000": "is not a host name or address",
    "http://127.0.0.1:8000/?x=1": "no ?query or #fragment",
}


@pytest.mark.parametrize("url", sorted(BAD))
def test_bad_url_is_one_line_and_nothing_runs(url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    with pytest.raises(SystemExit) as exc:
        main(["ramp", "--url", url, "--state-dir", str(state)])
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert exc.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("amdtop: error: argument --url: ") and BAD[url] in lines[0], lines[0]
    assert not state.exists()  # refused before the state dir or anything else was touched


def test_password_in_a_bad_url_is_masked() -> None:
    with pytest.raises(ValueError, match="port") as exc:
        check_base_url("http://user:hunter2@127.0.0.1:99999")
    assert "hunter2" not in str(exc.value)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "https://example.com", "http://[::1]:8000", "http://host:1/serve", " http://h:80 "]
)
def test_good_urls_pass(url: str) -> None:
    assert check_base_url(url) == url.strip()
