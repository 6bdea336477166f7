"""from_pretrained / push_to_hub with huggingface_hub's real code paths against a local stand-in
of the Hub (tests/hub_standin.py), then offline (HF_HUB_OFFLINE=1) from what was downloaded.

huggingface_hub reads HF_ENDPOINT / HF_HUB_OFFLINE / HF_HUB_DISABLE_XET at import, and other
tests import it first, so each scenario runs in a child process with its environment set.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infinigram_hf import InfiniGramIndex
from infinigram_hf.build import build_index

from hub_standin import HubStandIn

DATA = Path(__file__).resolve().parent / "data"
QUERIES = [[], [1], [1, 2], [256], [5, 1], [0, 1, 2]]

CHILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from infinigram_hf import InfiniGramIndex
    args = json.loads(sys.argv[1])
    out = {}
    for name, spec in args["open"].items():
        try:
            ix = InfiniGramIndex.from_pretrained(spec["repo"], cache_dir=spec.get("cache", args["cache"]), progress=False,
                                                 **spec.get("kw", {}))
        except Exception as exc:
            out[name] = {"error": type(exc).__name__ + ": " + str(exc)[:200]}
            continue
        out[name] = {"counts": [ix.count(q) for q in args["queries"]], "shards": ix.num_shards,
                     "docs": ix.num_docs, "tokenizer": type(ix.tokenizer).__name__ if ix.tokenizer else None,
                     "path": str(ix.paths[0]),
                     "links": sorted(str(p.relative_to(ix.paths[0])) for p in Path(ix.paths[0]).rglob("*")
                                     if p.is_symlink()),
                     "files": sorted(str(p.relative_to(ix.paths[0])) for p in Path(ix.paths[0]).rglob("*")
                                     if p.is_file())}
        if spec.get("push"):
            out[name]["url"] = ix.push_to_hub(spec["push"], token="hf_test", corpus="test corpus")
        ix.close()
    print(json.dumps(out))
""")


def run_child(env_extra: dict, args: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update({"HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": args["cache"] + "/home",
                "HF_TOKEN": "hf_test", **env_extra})
    res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture
def ours_with_tokenizer(tmp_path: Path, bpe_tokenizer) -> Path:
    texts = ["def main(): return 1", "import os\nprint(os.sep)", "def f(x): return x + 1"] * 3
    index = build_index(texts, tmp_path / "ours", tokenizer=bpe_tokenizer, progress=False)
    index.close()
    return tmp_path / "ours"


def counts(path: Path, **kw) -> list[int]:
    with InfiniGramIndex.open(path, **kw) as ix:
        return [ix.count(q) for q in QUERIES]


def test_push_and_from_pretrained_then_offline(tmp_path: Path, ours_with_tokenizer: Path) -> None:
    cache = str(tmp_path / "cache")
    official = DATA / "u16_three_shards_meta"
    with HubStandIn(tmp_path / "hub") as hub:
        # one child: open local directories and push them (our index with its tokenizer, an official
        # one), then download both (official without arguments: infinigram.json; one shard only)
        res = run_child({"HF_ENDPOINT": hub.url}, {"cache": cache, "queries": QUERIES, "open": {
            "local_ours": {"repo": str(ours_with_tokenizer), "push": "org/ours", "kw": {"load_tokenizer": False}},
            "local_official": {"repo": str(official), "kw": {"vocab_size": 65001, "eos_token_id": 5},
                               "push": "org/official"},
            "ours": {"repo": "org/ours"},
            "official": {"repo": "org/official", "push": "org/again"},  # pushed from the cache's snapshot
            "again": {"repo": "org/again"},
            "one_shard": {"repo": "org/official", "cache": cache + "/other",
                          "kw": {"allow_patterns": ["*.1"], "revision": "main"}},
            "missing": {"repo": "org/nothing"},
        }})
        assert "commit" in res["local_official"]["url"]
        readme = hub.store.obj(next(e["sha256"] for p, e in hub.store.files("model", "org/official", "main")[1].items()
                                    if p == "README.md")).read_text()
        assert "65001" in readme and "infini-gram" in readme and "3 |" in readme
        assert res["ours"]["counts"] == res["local_ours"]["counts"] == counts(ours_with_tokenizer)
        assert res["ours"]["tokenizer"] is not None
        assert res["official"]["counts"] == counts(official, vocab_size=65001)
        assert res["official"]["shards"] == 3 and res["one_shard"]["shards"] == 1
        assert res["again"]["counts"] == res["official"]["counts"] and res["again"]["docs"] == res["official"]["docs"]
        assert "RepositoryNotFound" in res["missing"]["error"]
        assert any(line.startswith("GET /api/models/org/official/tree/") for line in hub.store.log)
    # opened straight from huggingface_hub's standard cache: snapshot folders of links into blobs/
    for name in ("ours", "official", "one_shard"):
        path = Path(res[name]["path"])
        assert path.parent.name == "snapshots" and (path.parent.parent / "blobs").is_dir(), path
        assert res[name]["links"] == res[name]["files"] and res[name]["files"], name
    assert not (tmp_path / "cache" / "infinigram_hf").exists()  # (no regular-file copy any more)
    assert "tokenized.1" in res["one_shard"]["files"] and "tokenized.0" not in res["one_shard"]["files"]
    res2 = res
    # round 3: the Hub is gone; offline, the cache answers, and what was never downloaded fails clearly
    res3 = run_child({"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "1"}, {
        "cache": cache, "queries": QUERIES, "open": {
            "official": {"repo": "org/official"}, "ours": {"repo": "org/ours", "kw": {"load_tokenizer": False}},
            "missing": {"repo": "org/nothing"}}})
    assert res3["official"]["counts"] == res2["official"]["counts"]
    assert res3["official"]["path"] == res2["official"]["path"]
    assert res3["ours"]["counts"] == res2["ours"]["counts"]
    assert "error" in res3["missing"]


def test_from_pretrained_refuses_a_bad_repo_id(tmp_path: Path, monkeypatch) -> None:
    # from a directory where "../../etc" is no local path (from the repository's root it would be
    # /etc, opened as a local path -- and refused as no index)
    here = tmp_path / "a" / "b" / "c"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    with pytest.raises(ValueError, match="repo_id"):
        InfiniGramIndex.from_pretrained("../../etc", cache_dir=tmp_path)


def fake_hub_snapshot(tmp_path: Path, src: Path) -> Path:
    """src laid out as huggingface_hub's cache does: blobs named by hash, a snapshot of links."""
    import hashlib

    repo = tmp_path / "models--org--fake"
    snap = repo / "snapshots" / ("0" * 40)
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, repo / "blobs" / digest)
        (snap / f.name).symlink_to(f"../../blobs/{digest}")
    return snap


def test_a_snapshot_of_links_is_read_in_place_and_no_other_link(tmp_path: Path) -> None:
    snap = fake_hub_snapshot(tmp_path, DATA / "u16_three_shards_meta")
    want = counts(DATA / "u16_three_shards_meta", vocab_size=65001)
    assert counts(snap, vocab_size=65001) == want
    with InfiniGramIndex.open(snap, vocab_size=65001) as ix:  # the metadata files through links too
        assert ix.get_doc(0).metadata["path"] == "shard0.jsonl"
    outside = tmp_path / "elsewhere"
    shutil.copyfile(DATA / "u16_three_shards_meta" / "table.0", outside)
    (snap / "table.0").unlink()
    (snap / "table.0").symlink_to(outside)  # a link of another shape, to the same bytes: refused
    with pytest.raises(Exception, match="link"):
        counts(snap, vocab_size=65001)
    (snap / "table.0").unlink()
    blob = next((snap.parent.parent / "blobs").iterdir())
    (snap / "table.0").symlink_to(f"../../blobs/../blobs/{blob.name}")  # not the cache's exact shape
    with pytest.raises(Exception, match="link"):
        counts(snap, vocab_size=65001)
