"""A local stand-in for the HuggingFace Hub's HTTP protocol (standard library only), enough for
huggingface_hub's real download and upload code paths (checked with 2.4.0):

  download: GET /api/{type}s/{repo}/revision/{rev}, GET .../tree/{rev}[/{path}]?recursive=,
            HEAD/GET /[{type}s/]{repo}/resolve/{rev}/{path} (ETag, X-Repo-Commit, Range -> 206)
  upload:   POST /api/repos/create, /api/validate-yaml, .../preupload/{rev}, .../commit/{rev}
            (ndjson), POST /{repo}.git/info/lfs/objects/batch, PUT /_lfs/{oid}, POST /_lfs_verify
  errors:   404 with X-Error-Code RepoNotFound / RevisionNotFound / EntryNotFound

The client must run with HF_HUB_DISABLE_XET=1 (uploads would otherwise take the Xet path) and
HF_ENDPOINT pointing here, set before huggingface_hub is imported (see tests/official/test_hub.py).

Example:
    >>> with HubStandIn(tmp_path) as hub:  # doctest: +SKIP
    ...     hub.seed("org/index", Path("my_index"))
    ...     os.environ["HF_ENDPOINT"] = hub.url
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional
from urllib.parse import parse_qs, unquote, urlparse

LFS_THRESHOLD = 10 * 1024 * 1024  # the Hub stores files over 10 MB (or binary ones) with LFS


def _blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Store:
    """Repositories: (type, id) -> {"refs": {branch: commit}, "commits": {commit: {path: entry}}};
    file contents content-addressed by sha256 under root/objects."""

    def __init__(self, root: Path):
        self.root = Path(root)
        (self.root / "objects").mkdir(parents=True, exist_ok=True)
        self.repos: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.log: list[str] = []

    def obj(self, sha256: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{64}", sha256):
            raise ValueError("bad oid")
        return self.root / "objects" / sha256

    def put(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        if not self.obj(sha).exists():
            self.obj(sha).write_bytes(data)
        return sha

    def create(self, rtype: str, repo_id: str) -> bool:
        with self.lock:
            if (rtype, repo_id) in self.repos:
                return False
            first = secrets.token_hex(20)
            self.repos[(rtype, repo_id)] = {"refs": {"main": first}, "commits": {first: {}}}
            return True

    def files(self, rtype: str, repo_id: str, rev: str) -> tuple[Optional[str], Any]:
        """(commit, {path: entry}) or (None, error code)."""
        repo = self.repos.get((rtype, repo_id))
        if repo is None:
            return None, "RepoNotFound"
        sha = repo["refs"].get(rev, rev)
        if sha not in repo["commits"]:
            return None, "RevisionNotFound"
        return sha, repo["commits"][sha]

    def entry(self, sha256: str, size: int, lfs: bool) -> dict[str, Any]:
        if lfs:
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
            return {"sha256": sha256, "size": size, "lfs": True, "blob_id": _blob_sha1(pointer)}
        return {"sha256": sha256, "size": size, "lfs": False, "blob_id": _blob_sha1(self.obj(sha256).read_bytes())}

    def commit(self, rtype: str, repo_id: str, rev: str, files: dict[str, Any]) -> str:
        with self.lock:
            new = secrets.token_hex(20)
            repo = self.repos[(rtype, repo_id)]
            repo["commits"][new] = files
            repo["refs"][rev] = new
            return new

    def seed(self, repo_id: str, folder: Path, rtype: str = "model") -> str:
        """A repository holding the files of a local folder (one commit on main)."""
        self.create(rtype, repo_id)
        files = {}
        for p in sorted(Path(folder).rglob("*")):
            if p.is_file():
                data = p.read_bytes()
                files[p.relative_to(folder).as_posix()] = self.entry(self.put(data), len(data), len(data) > LFS_THRESHOLD)
        return self.commit(rtype, repo_id, "main", files)


_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_REPO = r"(?P<repo>[^/]+/[^/]+)"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    store: Store

    def log_message(self, *args: Any) -> None:  # (quiet)
        pass

    # ------------------------------------------------------------------ plumbing
    def _send(self, status: int, body: bytes = b"", headers: Optional[dict[str, str]] = None,
              ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, value: Any, status: int = 200, headers: Optional[dict[str, str]] = None) -> None:
        self._send(status, json.dumps(value).encode(), headers)

    def _error(self, code: str, status: int = 404, headers: Optional[dict[str, str]] = None) -> None:
        self._json({"error": code}, status, {"X-Error-Code": code, "X-Error-Message": code, **(headers or {})})

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _route(self) -> None:
        url = urlparse(self.path)
        path, query = unquote(url.path), parse_qs(url.query)
        self.store.log.append(f"{self.command} {path}" + (f" Range={self.headers['Range']}" if self.headers.get("Range") else ""))
        for method, pattern, fn in _ROUTES:
            m = re.fullmatch(pattern, path)
            if m and self.command in method:
                return fn(self, query=query, **m.groupdict())
        self._json({"error": f"stand-in: no route {self.command} {path}"}, 501)

    do_GET = do_HEAD = do_POST = do_PUT = _route

    # ------------------------------------------------------------------ endpoints
    def create_repo(self, **_: Any) -> None:
        body = json.loads(self._body())
        rtype = body.get("type") or "model"
        repo_id = f"{body['organization']}/{body['name']}" if body.get("organization") else body["name"]
        url = f"http://{self.headers['Host']}/{_PREFIX[rtype]}{repo_id}"
        if not self.store.create(rtype, repo_id):  # exist_ok=True reads "url" from the 409 body too
            return self._json({"error": "exists", "url": url}, 409)
        self._json({"url": url, "name": repo_id})

    def validate_yaml(self, **_: Any) -> None:
        self._body()
        self._json({"errors": [], "warnings": []})

    def repo_info(self, types: str, repo: str, rev: str = "main", **_: Any) -> None:
        sha, files = self.store.files(_TYPES[types], repo, rev)
        if sha is None:
            return self._error(files)
        self._json({"id": repo, "sha": sha, "private": False, "siblings": [{"rfilename": p} for p in sorted(files)]})

    def tree(self, types: str, repo: str, rev: str, sub: str = "", query: Any = None, **_: Any) -> None:
        sha, files = self.store.files(_TYPES[types], repo, rev)
        if sha is None:
            return self._error(files)
        sub = (sub or "").strip("/")
        recursive = (query or {}).get("recursive", ["false"])[0].lower() == "true"
        out, dirs = [], set()
        for p, e in sorted(files.items()):
            if sub and not p.startswith(sub + "/"):
                continue
            rest = p[len(sub) + 1:] if sub else p
            if "/" in rest and not recursive:
                dirs.add((sub + "/" if sub else "") + rest.split("/")[0])
                continue
            item = {"type": "file", "path": p, "size": e["size"], "oid": e["blob_id"]}
            if e["lfs"]:
                item["lfs"] = {"oid": e["sha256"], "size": e["size"], "pointerSize": 134}
            out.append(item)
        out += [{"type": "directory", "path": d, "oid": "0" * 40, "size": 0} for d in sorted(dirs)]
        self._json(out)

    def resolve(self, repo: str, rev: str, file: str, prefix: str = "", **_: Any) -> None:
        rtype = {"": "model", "datasets/": "dataset", "spaces/": "space"}[prefix or ""]
        sha, files = self.store.files(rtype, repo, rev)
        if sha is None:
            return self._error(files)
        e = files.get(file)
        if e is None:
            return self._error("EntryNotFound", headers={"X-Repo-Commit": sha})
        etag = e["sha256"] if e["lfs"] else e["blob_id"]
        headers = {"X-Repo-Commit": sha, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
        if e["lfs"]:
            headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(e["size"])})
        data = self.store.obj(e["sha256"]).read_bytes()
        rng = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        if rng and self.command == "GET":
            a = int(rng.group(1))
            b = int(rng.group(2)) + 1 if rng.group(2) else len(data)
            headers["Content-Range"] = f"bytes {a}-{b - 1}/{len(data)}"
            return self._send(206, data[a:b], headers, "application/octet-stream")
        self._send(200, data, headers, "application/octet-stream")

    def preupload(self, types: str, repo: str, rev: str, **_: Any) -> None:
        sha, files = self.store.files(_TYPES[types], repo, rev)
        if sha is None:
            return self._error(files)
        out = []
        for f in json.loads(self._body())["files"]:
            sample = base64.b64decode(f.get("sample", ""))
            lfs = f["size"] > LFS_THRESHOLD or b"\0" in sample
            old = files.get(f["path"])
            out.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False,
                        "oid": old["blob_id"] if old else None})
        self._json({"files": out, "commitOid": sha})

    def lfs_batch(self, **_: Any) -> None:
        host = f"http://{self.headers['Host']}"
        objs = []
        for o in json.loads(self._body())["objects"]:
            item = {"oid": o["oid"], "size": o["size"], "authenticated": True}
            if not self.store.obj(o["oid"]).exists():
                item["actions"] = {"upload": {"href": f"{host}/_lfs/{o['oid']}"}, "verify": {"href": f"{host}/_lfs_verify"}}
            objs.append(item)
        self._json({"transfer": "basic", "objects": objs})

    def lfs_put(self, oid: str, **_: Any) -> None:
        data = self._body()
        if hashlib.sha256(data).hexdigest() != oid:
            return self._json({"error": "sha256 mismatch"}, 400)
        self.store.put(data)
        self._send(200)

    def lfs_verify(self, **_: Any) -> None:
        body = json.loads(self._body())
        p = self.store.obj(body["oid"])
        self._json({}, 200 if p.exists() and p.stat().st_size == body["size"] else 404)

    def commit(self, types: str, repo: str, rev: str, **_: Any) -> None:
        rtype = _TYPES[types]
        sha, files = self.store.files(rtype, repo, rev)
        if sha is None:
            return self._error(files)
        files = dict(files)
        for line in self._body().splitlines():
            item = json.loads(line)
            key, v = item["key"], item["value"]
            if key == "file":
                data = base64.b64decode(v["content"])
                files[v["path"]] = self.store.entry(self.store.put(data), len(data), False)
            elif key == "lfsFile":
                if not self.store.obj(v["oid"]).exists():
                    return self._json({"error": f"LFS object {v['oid']} missing"}, 422)
                files[v["path"]] = self.store.entry(v["oid"], v["size"], True)
            elif key == "deletedFile":
                files.pop(v["path"], None)
            elif key == "deletedFolder":
                files = {p: e for p, e in files.items() if not p.startswith(v["path"].rstrip("/") + "/")}
        new = self.store.commit(rtype, repo, rev, files)
        self._json({"commitUrl": f"http://{self.headers['Host']}/{_PREFIX[rtype]}{repo}/commit/{new}",
                    "commitOid": new, "pullRequestUrl": None})


_API = r"/api/(?P<types>models|datasets|spaces)/" + _REPO
_ROUTES = [
    ("POST", r"/api/repos/create", _Handler.create_repo),
    ("POST", r"/api/validate-yaml", _Handler.validate_yaml),
    ("GET", _API, _Handler.repo_info),
    ("GET", _API + r"/revision/(?P<rev>[^/]+)", _Handler.repo_info),
    ("GET", _API + r"/tree/(?P<rev>[^/]+)(?:/(?P<sub>.*))?", _Handler.tree),
    ("POST", _API + r"/preupload/(?P<rev>[^/]+)", _Handler.preupload),
    ("POST", _API + r"/commit/(?P<rev>[^/]+)", _Handler.commit),
    ("PUT", r"/_lfs/(?P<oid>[0-9a-f]{64})", _Handler.lfs_put),
    ("POST", r"/_lfs_verify", _Handler.lfs_verify),
    ("POST", r"/(?:datasets/|spaces/)?" + _REPO + r"\.git/info/lfs/objects/batch", _Handler.lfs_batch),
    ("GETHEAD", r"/(?P<prefix>datasets/|spaces/)?" + _REPO + r"/resolve/(?P<rev>[^/]+)/(?P<file>.+)", _Handler.resolve),
]


class HubStandIn:
    """The stand-in served on 127.0.0.1 (a free port) in a daemon thread while in the `with`."""

    def __init__(self, root: Path):
        self.store = Store(root)
        handler = type("Handler", (_Handler,), {"store": self.store})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def seed(self, repo_id: str, folder: Path, rtype: str = "model") -> str:
        return self.store.seed(repo_id, folder, rtype)

    def __enter__(self) -> "HubStandIn":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
