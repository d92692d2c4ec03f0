"""A keyed vLLM worker (issue 23 item 7): the key reaches vLLM through ``VLLM_API_KEY`` (never argv, which every user
reads in /proc), vLLM enforces it, and amdtop's own clients (readiness, the ramp) send it as ``Authorization: Bearer``.

One short real vLLM start on the CPU (tiny-llama, recipe: shared/reference/vllm.md section 11).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from amdtop.model import WorkerState
from amdtop.ramp import Ramp, RampConfig
from amdtop.supervisor import Supervisor
from amdtop.telemetry.sim import SimBackend
from tests.e2e.conftest import READY_TIMEOUT_S, SERVED_NAME, VLLM_CACHE_ROOT, marked_pids, profile_toml, require_vllm

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
PORT = 18014
KEY = "sk-e2e-not-in-argv"


def test_keyed_vllm_gets_its_key_from_the_environment_and_amdtop_sends_it(tmp_path: Path) -> None:
    require_vllm()
    VLLM_CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "workers.toml"
    text = profile_toml("keyed", PORT)
    config.write_text(text.replace("[worker.args]\n", f'[worker.args]\napi-key = "{KEY}"\n', 1))
    sup = Supervisor(config, tmp_path / "state", topology=SimBackend().topology(), vendor="AMD", grace_s=30.0)
    try:
        sup.launch("keyed")
        st = sup.wait_ready("keyed", timeout=READY_TIMEOUT_S)  # readiness with the key known to the prober
        assert st.state is WorkerState.READY and st.pid is not None
        for pid in st.pids:
            assert KEY.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), pid
        assert f"VLLM_API_KEY={KEY}".encode() in Path(f"/proc/{st.pid}/environ").read_bytes().split(b"\0")
        url = st.url or ""
        assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 401  # vLLM read the key and enforces it
        headers = {"Authorization": f"Bearer {KEY}"}
        assert httpx.get(f"{url}/v1/models", timeout=10, headers=headers).status_code == 200
        cfg = RampConfig(url=url, model=SERVED_NAME, concurrencies=(1,), step_seconds=2.0, warmup_seconds=0.5,
                         input_len=16, output_len=16, refine_points=0, api_key=sup.api_key("keyed"))  # fmt: skip
        doc = asyncio.run(Ramp(cfg, tmp_path / "state").run()).to_json()
        assert doc["steps"][0]["completed"] > 0 and doc["steps"][0]["failed"] == 0, doc["steps"]
        assert KEY not in json.dumps(doc)
        for f in (tmp_path / "state").rglob("*"):
            if f.is_file():
                assert KEY.encode() not in f.read_bytes(), f
    finally:
        report = sup.stop("keyed")
        sup.close()
        assert not marked_pids("keyed:"), report.message
