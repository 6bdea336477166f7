"""What the client and the server load: `import infinigram_hf` (and a RemoteIndex's module) no
HTTP library; the server no torch or transformers. (One child process for both checks.)"""
import subprocess
import sys

WATCH = ("httpx", "starlette", "uvicorn", "prometheus_client", "torch", "transformers")
PROBE = f"""
import sys
def loaded():
    return ",".join(m for m in {WATCH!r} if m in sys.modules)
import infinigram_hf, infinigram_hf.index.remote, infinigram_hf.index.wire
print(loaded())
import infinigram_hf.serve, infinigram_hf.serve.run, infinigram_hf.cli.serve_command
print(loaded())
"""


def test_client_loads_no_http_library_and_server_no_torch() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    client, server = out.split("\n")[:2]
    assert client == ""
    assert "torch" not in server and "transformers" not in server and "starlette" in server
