#!/usr/bin/env python3
"""Prepare the training corpus for hearth's default model (issue 7).

Source: the Debian package python3.11-doc (the Python 3.11 documentation, PSF License
Version 2; see models/default/README.md). Runs on any Debian/Ubuntu machine with apt and
dpkg; needs only the Python standard library.

    python3 tools/train_default/prepare_data.py --out .device/train

Steps: `apt-get download python3.11-doc` (or --deb FILE), `dpkg -x`, then every HTML page
under usr/share/doc/python3.11/html (sorted by path; index/search/TOC pages skipped) is
converted to plain text with html.parser: only Sphinx's main body (<div class="body"
role="main">) is kept, so navigation bars, sidebars and footers are dropped; paragraphs are
whitespace-collapsed, code blocks (<pre>) keep their layout, "¶" permalinks are removed.
Every 50th document (index % 50 == 49 in sorted order) is held out for evaluation.

Writes to --out: train.jsonl.gz and heldout.jsonl.gz ({"path", "text"} per line),
heldout.txt (the held-out documents joined by blank lines, cut at a paragraph boundary
to at most --heldout-bytes bytes; this is the perplexity file), and manifest.json.
The output is deterministic for a given .deb.
"""
import argparse
import glob
import gzip
import hashlib
import html.parser
import json
import os
import re
import subprocess
import sys
import tempfile

HOLDOUT_EVERY = 50
SKIP = re.compile(r"^(genindex.*|py-modindex|search|contents|download)\.html$")
BLOCK = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "div", "pre", "li", "dt", "dd", "tr", "blockquote",
         "table", "ul", "ol", "dl", "section", "figure", "caption", "br", "hr", "th", "td"}
HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}


class BodyText(html.parser.HTMLParser):
    """Collects the text of <div class="body" role="main"> as a list of blocks."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.div_depth = 0        # nesting of <div> elements
        self.body_at = None       # div depth at which the main body started
        self.skip_depth = 0       # >0 inside an element whose text is dropped
        self.skip_stack = []
        self.pre = 0
        self.buf = []
        self.blocks = []
        self.block_kind = "p"
        self.prefix = ""          # "- " waiting for the first text of a list item

    def active(self):
        """Inside the main body (body_at == -1 once it has closed)."""
        return self.body_at not in (None, -1)

    def flush(self):
        text = "".join(self.buf)
        self.buf = []
        if self.pre:
            return
        if self.block_kind == "pre":
            lines = [l.rstrip() for l in text.split("\n")]
            while lines and not lines[0]:
                lines.pop(0)
            while lines and not lines[-1]:
                lines.pop()
            text = "\n".join(lines)
        else:
            text = " ".join(text.split())
        if text:
            item = bool(self.prefix)
            self.blocks.append((item, self.prefix + text))
            self.prefix = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "div":
            self.div_depth += 1
            if self.body_at is None and "body" in cls and a.get("role") == "main":
                self.body_at = self.div_depth
                return
        if not self.active():
            return
        if self.skip_depth:
            if tag == self.skip_stack[-1][0]:
                self.skip_stack[-1][1] += 1
            return
        if tag in ("script", "style") or (tag == "a" and "headerlink" in cls) or "linenos" in cls:
            self.skip_depth = 1
            self.skip_stack.append([tag, 1])
            return
        if tag in BLOCK:
            self.flush()
            if tag == "pre":
                self.pre += 1
                self.block_kind = "pre"
            elif not self.pre:
                self.block_kind = "p"
            if tag == "li":
                self.prefix = "- "
            if tag in ("td", "th"):
                self.buf.append(" ")

    def handle_endtag(self, tag):
        if not self.active():
            if tag == "div":
                self.div_depth -= 1
            return
        if self.skip_depth:
            if tag == self.skip_stack[-1][0]:
                self.skip_stack[-1][1] -= 1
                if self.skip_stack[-1][1] == 0:
                    self.skip_stack.pop()
                    self.skip_depth = 0
            if tag == "div":
                self.div_depth -= 1
            return
        if tag == "div":
            if self.div_depth == self.body_at:
                self.flush()
                self.body_at = -1  # done: never re-enter
            self.div_depth -= 1
        if tag in BLOCK and self.active():
            if tag == "pre":
                self.pre = max(0, self.pre - 1)
                self.flush()
                self.block_kind = "p"
            elif not self.pre:
                self.flush()

    def handle_data(self, data):
        if self.active() and not self.skip_depth:
            self.buf.append(data.replace("\u00b6", ""))



def page_text(path):
    p = BodyText()
    with open(path, encoding="utf-8", errors="replace") as f:
        p.feed(f.read())
    p.close()
    if p.body_at is None:
        return ""
    if p.buf and p.active():
        p.flush()
    # consecutive list items are separated by one newline, everything else by a blank line
    parts = []
    for i, (item, block) in enumerate(p.blocks):
        if i:
            parts.append("\n" if item and p.blocks[i - 1][0] else "\n\n")
        parts.append(block)
    text = "".join(parts)
    return text.replace("\r", "").replace("\u00a0", " ").strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".device/train")
    ap.add_argument("--deb", help="a python3.11-doc .deb already downloaded (default: apt-get download)")
    ap.add_argument("--heldout-bytes", type=int, default=200_000)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="pydoc-")
    deb = args.deb
    if not deb:
        subprocess.run(["apt-get", "download", "python3.11-doc"], cwd=work, check=True)
        deb = sorted(glob.glob(os.path.join(work, "python3.11-doc_*.deb")))[-1]
    deb_sha = hashlib.sha256(open(deb, "rb").read()).hexdigest()
    root = os.path.join(work, "x")
    subprocess.run(["dpkg", "-x", deb, root], check=True)
    html_root = os.path.join(root, "usr/share/doc/python3.11/html")
    pages = []
    for dirpath, dirnames, filenames in os.walk(html_root):
        dirnames[:] = [d for d in dirnames if not d.startswith("_")]
        for fn in filenames:
            if fn.endswith(".html") and not SKIP.match(fn):
                pages.append(os.path.relpath(os.path.join(dirpath, fn), html_root))
    pages.sort()
    train, held = [], []
    for i, rel in enumerate(pages):
        text = page_text(os.path.join(html_root, rel))
        if len(text) < 200:
            continue
        (held if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1 else train).append({"path": rel, "text": text})
    for name, docs in (("train", train), ("heldout", held)):
        with gzip.GzipFile(os.path.join(args.out, f"{name}.jsonl.gz"), "wb", mtime=0) as f:
            for d in docs:
                f.write((json.dumps(d, ensure_ascii=False) + "\n").encode("utf-8"))
    # The perplexity file: held-out documents joined by blank lines, cut at a paragraph boundary.
    full = "\n\n".join(d["text"] for d in held)
    cut = full.encode("utf-8")[: args.heldout_bytes].decode("utf-8", errors="ignore")
    if len(cut) < len(full):
        cut = cut[: cut.rfind("\n\n")]
    cut = cut.strip() + "\n"
    with open(os.path.join(args.out, "heldout.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(cut)
    manifest = {
        "source": "Debian package python3.11-doc (" + os.path.basename(deb) + ")",
        "deb_sha256": deb_sha,
        "license": "PSF License Version 2 (Python documentation); see usr/share/doc/python3.11-doc/copyright",
        "pages_seen": len(pages),
        "train_docs": len(train),
        "heldout_docs": len(held),
        "heldout_paths": [d["path"] for d in held],
        "train_chars": sum(len(d["text"]) for d in train),
        "heldout_chars": sum(len(d["text"]) for d in held),
        "heldout_txt_bytes": len(cut.encode("utf-8")),
        "heldout_rule": f"document index % {HOLDOUT_EVERY} == {HOLDOUT_EVERY - 1} in sorted path order",
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(json.dumps({k: v for k, v in manifest.items() if k != "heldout_paths"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
