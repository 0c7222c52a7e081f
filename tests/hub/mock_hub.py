#!/usr/bin/env python3
"""A local mock of the Hugging Face Hub for `hearth pull`'s end-to-end test (no network).

Two servers on 127.0.0.1: the Hub (the /api/models revision and tree endpoints, /resolve/ for
files) and a "CDN" on another port, where the Hub redirects LFS files (302, with X-Linked-Etag
and X-Linked-Size) and which answers Range requests. Repos, built at start from a checkpoint
directory (--model-dir, the committed tiny model):
  test-org/tiny     main: the checkpoint plus files pull must skip (.bin, .gguf, onnx/);
                    v1: the same with another generation_config.json (another commit)
  test-org/gated    the checkpoint, gated: its API answers anyone (with "gated": "manual"), its
                    files need the token hf_test_token (else 401 GatedRepo); a wrong token
                    is refused everywhere (401 without an error code)
  test-org/sharded  the weights split in two shards with an index, plus consolidated.safetensors
                    (the same weights unsharded, which the index does not name)
Faults, set with GET /_control?set=NAME&path=FILE&n=N and cleared with /_control?clear=1:
  cut_once   the CDN closes the connection after n bytes of FILE's body, once
  corrupt    the CDN serves FILE with one byte flipped, until cleared
  missing    /resolve/ answers 404 EntryNotFound for FILE
  notree     the tree API answers a bare 404 (a mirror without it)
  flaky_api  the next n /api/ requests answer 503
Every request is logged to --log as one line: SERVER METHOD PATH range=R auth=0|1 status=S.
The CDN refuses (400) any request that carries an Authorization header.
"""
import argparse
import hashlib
import http.server
import json
import os
import socket
import struct
import threading
import urllib.parse

TOKEN = "hf_test_token"
LFS_MIN_SIZE = 64 * 1024
TREE_PAGE = 4


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def split_safetensors(data):
    """The tensors of a safetensors file as two shards and an index naming them."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    meta = header.pop("__metadata__", None)
    names = sorted(header)
    halves = [names[: len(names) // 2], names[len(names) // 2 :]]
    shards, weight_map = {}, {}
    for i, part in enumerate(halves):
        shard_name = "model-%05d-of-%05d.safetensors" % (i + 1, len(halves))
        new_header, chunks, offset = {}, [], 0
        if meta is not None:
            new_header["__metadata__"] = meta
        for name in part:
            begin, end = header[name]["data_offsets"]
            new_header[name] = dict(header[name], data_offsets=[offset, offset + end - begin])
            chunks.append(body[begin:end])
            offset += end - begin
            weight_map[name] = shard_name
        text = json.dumps(new_header).encode()
        text += b" " * (-len(text) % 8)
        shards[shard_name] = struct.pack("<Q", len(text)) + text + b"".join(chunks)
    index = {"metadata": {"total_size": sum(len(s) for s in shards.values())},
             "weight_map": weight_map}
    return shards, json.dumps(index, indent=2).encode()


class Repo:
    def __init__(self, repo_id, revisions, gated=False):
        self.repo_id = repo_id
        self.gated = gated
        self.revisions = {}  # name -> (commit, {path: bytes})
        for rev, files in revisions.items():
            digest = hashlib.sha1(repo_id.encode() + rev.encode())
            for path in sorted(files):
                digest.update(path.encode() + hashlib.sha256(files[path]).digest())
            self.revisions[rev] = (digest.hexdigest(), files)

    def lookup(self, rev):
        for name, (commit, files) in self.revisions.items():
            if rev in (name, commit):
                return commit, files
        return None, None


def build_repos(model_dir):
    base = {}
    for name in ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "README.md"]:
        with open(os.path.join(model_dir, name), "rb") as f:
            base[name] = f.read()
    tiny_main = dict(base)
    tiny_main.update({"pytorch_model.bin": b"\x00" * 5000, "model.gguf": b"GGUF" * 100,
                      "onnx/model.onnx": b"onnx" * 100, "pytorch_model.bin.index.json": b"{}"})
    tiny_v1 = dict(tiny_main)
    gen = json.loads(base["generation_config.json"])
    gen["temperature"] = 0.25
    tiny_v1["generation_config.json"] = json.dumps(gen, indent=2).encode()
    shards, index = split_safetensors(base["model.safetensors"])
    sharded = {k: v for k, v in base.items() if k != "model.safetensors"}
    sharded.update(shards)
    sharded["model.safetensors.index.json"] = index
    sharded["consolidated.safetensors"] = base["model.safetensors"]
    repos = [Repo("test-org/tiny", {"main": tiny_main, "v1": tiny_v1}),
             Repo("test-org/gated", {"main": base}, gated=True),
             Repo("test-org/sharded", {"main": sharded})]
    return {r.repo_id: r for r in repos}


class State:
    def __init__(self, repos, log_path):
        self.repos = repos
        self.blobs = {}  # sha256 -> bytes
        for repo in repos.values():
            for _, files in repo.revisions.values():
                for data in files.values():
                    self.blobs[hashlib.sha256(data).hexdigest()] = data
        self.lock = threading.Lock()
        self.faults = {}
        self.log_file = open(log_path, "a", buffering=1)
        self.hub_port = self.cdn_port = 0

    def log(self, line):
        with self.lock:
            self.log_file.write(line + "\n")

    def take_fault(self, name, path=None, consume=False):
        """The fault's n when `name` is set (for `path`, if given); consumed when asked."""
        with self.lock:
            f = self.faults.get(name)
            if f is None or (path is not None and f.get("path") != path):
                return None
            if consume:
                del self.faults[name]
            return f.get("n", 0)


def make_handler(state, server_name):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send(self, status, body=b"", headers=None, cut_after=None):
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.log_request_line(status)
            if self.command == "HEAD":
                return
            if cut_after is not None:
                self.wfile.write(body[:cut_after])
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            self.wfile.write(body)

        def log_request_line(self, status):
            state.log("%s %s %s range=%s auth=%d status=%d" % (
                server_name, self.command, self.path, self.headers.get("Range", "-"),
                1 if self.headers.get("Authorization") else 0, status))

        def error(self, status, code, message):
            headers = {"Content-Type": "application/json", "X-Error-Message": message}
            if code:
                headers["X-Error-Code"] = code
            self.send(status, json.dumps({"error": message}).encode(), headers)

        def ranged(self, data, headers, cut_after=None):
            """200 or, with a Range of bytes=N-, 206 from byte N."""
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes=") and rng.endswith("-"):
                start = int(rng[6:-1])
                if start >= len(data):
                    return self.send(416, b"", dict(headers, **{"Content-Range": "bytes */%d" % len(data)}))
                headers = dict(headers, **{"Content-Range": "bytes %d-%d/%d" % (start, len(data) - 1, len(data))})
                return self.send(206, data[start:], headers, cut_after)
            return self.send(200, data, headers, cut_after)

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
            if server_name == "cdn":
                return self.cdn(parts, urllib.parse.parse_qs(url.query))
            if parts[0] == "_control":
                return self.control(urllib.parse.parse_qs(url.query))
            if parts[0] == "api":
                if state.take_fault("flaky_api") is not None:
                    with state.lock:
                        state.faults["flaky_api"]["n"] -= 1
                        if state.faults["flaky_api"]["n"] <= 0:
                            del state.faults["flaky_api"]
                    return self.error(503, None, "try again")
                return self.api(parts, urllib.parse.parse_qs(url.query))
            if len(parts) >= 5 and parts[2] == "resolve":
                return self.resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]))
            self.error(404, None, "no such route")

        def control(self, q):
            with state.lock:
                if "clear" in q:
                    state.faults.clear()
                else:
                    state.faults[q["set"][0]] = {"path": q.get("path", [None])[0],
                                                 "n": int(q.get("n", ["0"])[0])}
            self.send(200, b"ok")

        def authorize(self, repo, files):
            """True when the request may read `repo` (its `files`, or its API); else the error
            is sent."""
            auth = self.headers.get("Authorization", "")
            if not repo.gated or auth == "Bearer " + TOKEN:
                return True
            if auth:
                self.error(401, None, "Invalid credentials in Authorization header")
                return False
            if files:
                self.error(401, "GatedRepo", "Access to model %s is restricted." % repo.repo_id)
                return False
            return True

        def find(self, repo_id, rev, files=False):
            repo = state.repos.get(repo_id)
            if repo is None:
                self.error(404, "RepoNotFound", "Repository not found")
                return None, None, None
            if not self.authorize(repo, files):
                return None, None, None
            commit, files = repo.lookup(rev)
            if commit is None:
                self.error(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
                return None, None, None
            return repo, commit, files

        def api(self, parts, q):
            # /api/models/{org}/{name}/{revision|tree}/{rev}
            if len(parts) < 6 or parts[1] != "models":
                return self.error(404, None, "no such route")
            repo_id, kind, rev = "/".join(parts[2:4]), parts[4], "/".join(parts[5:])
            if kind == "tree" and state.take_fault("notree") is not None:
                return self.send(404, b"Not Found")
            repo, commit, files = self.find(repo_id, rev)
            if repo is None:
                return
            if kind == "revision":
                body = {"id": repo_id, "sha": commit, "gated": "manual" if repo.gated else False,
                        "siblings": [{"rfilename": p} for p in sorted(files)]}
                return self.send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})
            if kind != "tree":
                return self.error(404, None, "no such route")
            entries, dirs = [], set()
            for path in sorted(files):
                data = files[path]
                if "/" in path and path.rsplit("/", 1)[0] not in dirs:
                    dirs.add(path.rsplit("/", 1)[0])
                    entries.append({"type": "directory", "oid": "0" * 40, "size": 0,
                                    "path": path.rsplit("/", 1)[0]})
                e = {"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": path}
                if len(data) >= LFS_MIN_SIZE:
                    e["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                                "pointerSize": 134}
                entries.append(e)
            cursor = int(q.get("cursor", ["0"])[0])
            page = entries[cursor : cursor + TREE_PAGE]
            headers = {"Content-Type": "application/json"}
            if cursor + TREE_PAGE < len(entries):
                headers["Link"] = '<http://127.0.0.1:%d/api/models/%s/tree/%s?recursive=true&cursor=%d>; rel="next"' % (
                    state.hub_port, repo_id, rev, cursor + TREE_PAGE)
            self.send(200, json.dumps(page).encode(), headers)

        def resolve(self, repo_id, rev, path):
            repo, commit, files = self.find(repo_id, rev, files=True)
            if repo is None:
                return
            if path not in files or state.take_fault("missing", path) is not None:
                return self.error(404, "EntryNotFound", "%s does not exist" % path)
            data = files[path]
            headers = {"X-Repo-Commit": commit, "ETag": '"%s"' % git_blob_sha1(data)}
            if len(data) >= LFS_MIN_SIZE:
                sha = hashlib.sha256(data).hexdigest()
                headers.update({"X-Linked-Etag": '"%s"' % sha, "X-Linked-Size": str(len(data)),
                                "Location": "http://127.0.0.1:%d/blob/%s?path=%s" % (
                                    state.cdn_port, sha, urllib.parse.quote(path))})
                return self.send(302, b"", headers)
            self.ranged(data, headers)

        def cdn(self, parts, q):
            if self.headers.get("Authorization"):
                return self.error(400, None, "the CDN got an Authorization header")
            if len(parts) != 2 or parts[0] != "blob" or parts[1] not in state.blobs:
                return self.error(404, None, "no such blob")
            data = state.blobs[parts[1]]
            path = q.get("path", [""])[0]  # the file the Hub redirected for, for the faults
            if state.take_fault("corrupt", path) is not None:
                middle = len(data) // 2
                data = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]
            cut = state.take_fault("cut_once", path, consume=True)
            self.ranged(data, {"ETag": '"%s"' % parts[1]}, cut)

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    args = ap.parse_args()
    state = State(build_repos(args.model_dir), args.log)
    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state, "hub"))
    cdn = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state, "cdn"))
    state.hub_port, state.cdn_port = hub.server_address[1], cdn.server_address[1]
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d %d\n" % (state.hub_port, state.cdn_port))
    os.rename(tmp, args.port_file)
    hub.serve_forever()


if __name__ == "__main__":
    main()
