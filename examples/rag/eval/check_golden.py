#!/usr/bin/env python3
"""Checks the golden evaluation dataset (golden.yaml + corpus/) and the BEIR fixture (beir-mini/).

Golden dataset:
- every case has the required fields, a unique id and known tags; `multi-doc` cases name two or
  more relevant refs; the dataset has the promised mix (cases per tag, formats covered);
- every `relevant` ref exists: a file under the corpus, and for CSV rows (`path.csv#row=N`, 1-based
  data row) and PDF pages (`path.pdf#page=N`) the row or page exists. CSV and PDF refs must carry
  the suffix, because the loader's ids do (`data/x.csv` alone would never suffix-match
  `data/x.csv#row=3`);
- every expected substring occurs verbatim in the text of at least one relevant document, as the
  loader sees it: Markdown as written; a CSV row as `Header: value` lines; a PDF page as its text
  lines; HTML as its visible text (scripts, styles and hidden elements removed, whitespace
  collapsed). A substring found only in hidden HTML is reported as such.

BEIR fixture: corpus.jsonl has unique `_id`s with `title` and `text`, queries.jsonl unique `_id`s
with `text`, qrels/test.tsv a `query-id corpus-id score` header and graded scores 0-2 that refer to
existing ids, and every query has at least one relevant document.

Standard library only; PyYAML is used when installed, otherwise a small parser for the subset of
YAML golden.yaml is written in (and when both are available they must agree).

Usage: check_golden.py [--golden PATH] [--beir DIR]    (defaults: files beside this script)
Exit status 0 when everything holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
import zlib
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

HERE = Path(__file__).resolve().parent
KNOWN_TAGS = {"lexical", "paraphrase", "multi-doc", "csv", "pdf", "html", "correctif"}
REQUIRED = ("id", "question", "relevant", "expected_substrings", "reference_answer", "tags")
# The mix promised in examples/rag/eval/README.md.
MINIMUM_PER_TAG = {"lexical": 15, "paraphrase": 12, "multi-doc": 8, "correctif": 5}
MINIMUM_CASES = 50
MINIMUM_CSV_PDF_CASES = 5
MINIMUM_DOCUMENTS = 60


# ---------------------------------------------------------------------------------------------
# A small YAML reader for golden.yaml's subset: `key: scalar`, `key: { k: v, ... }`, `key: [a, b]`
# and a top-level `cases:` list of flat mappings. Strings are plain or double-quoted.


class YamlSubsetError(Exception):
    pass


def _scalar(text: str, where: str):
    text = text.strip()
    if text.startswith('"'):
        if not text.endswith('"') or len(text) < 2:
            raise YamlSubsetError(f"{where}: unterminated double-quoted string")
        return json.loads(text)
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    if text in ("null", "~", ""):
        return None
    return text


def _split_flow(body: str, where: str) -> list[str]:
    parts, depth, current, quoted, escaped = [], 0, "", False, False
    for ch in body:
        if quoted:
            current += ch
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
            continue
        if ch == '"':
            quoted = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if quoted or depth:
        raise YamlSubsetError(f"{where}: unbalanced quotes or brackets")
    if current.strip():
        parts.append(current)
    return parts


def _value(text: str, where: str):
    text = text.strip()
    if text.startswith("["):
        if not text.endswith("]"):
            raise YamlSubsetError(f"{where}: a flow list must close on the same line")
        return [_value(p, where) for p in _split_flow(text[1:-1], where)]
    if text.startswith("{"):
        if not text.endswith("}"):
            raise YamlSubsetError(f"{where}: a flow mapping must close on the same line")
        out = {}
        for part in _split_flow(text[1:-1], where):
            key, sep, val = part.partition(":")
            if not sep:
                raise YamlSubsetError(f"{where}: flow mapping entry without ':'")
            out[key.strip()] = _value(val, where)
        return out
    return _scalar(text, where)


def parse_yaml_subset(text: str, source: str) -> dict:
    data: dict = {}
    current_list = None
    current_item = None
    for number, raw in enumerate(text.splitlines(), start=1):
        where = f"{source}:{number}"
        line = raw.rstrip()
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if indent == 0:
            key, sep, rest = line.partition(":")
            if not sep:
                raise YamlSubsetError(f"{where}: expected `key: value`")
            if rest.strip():
                data[key.strip()] = _value(rest, where)
                current_list = None
            else:
                current_list = data.setdefault(key.strip(), [])
            continue
        if current_list is None:
            raise YamlSubsetError(f"{where}: indented line outside a list")
        if stripped.startswith("- "):
            current_item = {}
            current_list.append(current_item)
            stripped = stripped[2:]
        if current_item is None:
            raise YamlSubsetError(f"{where}: list entry expected")
        key, sep, rest = stripped.partition(":")
        if not sep or not rest.strip():
            raise YamlSubsetError(f"{where}: expected `key: value` inside a case")
        current_item[key.strip()] = _value(rest, where)
    return data


def load_golden(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    mine = parse_yaml_subset(text, str(path))
    try:
        import yaml  # type: ignore
    except ImportError:
        return mine
    theirs = yaml.safe_load(text)
    if theirs != mine:
        raise YamlSubsetError(
            f"{path}: PyYAML and the subset reader disagree; keep golden.yaml to one-line "
            "`key: value` fields, flow lists and double-quoted strings"
        )
    return theirs


# ---------------------------------------------------------------------------------------------
# Document text as the loader sees it.

DROPPED = {"script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "embed"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}
BLOCK = {"p", "div", "section", "article", "aside", "header", "footer", "main", "nav", "li",
         "ul", "ol", "table", "tr", "td", "th", "thead", "tbody", "h1", "h2", "h3", "h4", "h5",
         "h6", "blockquote", "pre", "br", "title", "figure", "figcaption", "dl", "dt", "dd"}


def _is_hidden(attrs: dict[str, str | None]) -> bool:
    if "hidden" in attrs:
        return True
    if (attrs.get("aria-hidden") or "").strip().lower() == "true":
        return True
    for declaration in (attrs.get("style") or "").lower().split(";"):
        name, _, value = (part.strip() for part in declaration.partition(":"))
        if (name, value) in {("display", "none"), ("visibility", "hidden"),
                             ("visibility", "collapse"), ("opacity", "0"), ("font-size", "0")}:
            return True
    return False


class VisibleText(HTMLParser):
    """Splits an HTML page into visible text, hidden text and the title."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool, bool]] = []  # tag, dropped, hidden
        self.visible: list[str] = []
        self.hidden: list[str] = []
        self.title = ""
        self.scripts = 0
        self.hidden_elements = 0

    def _state(self) -> tuple[bool, bool]:
        if not self.stack:
            return False, False
        return self.stack[-1][1], self.stack[-1][2]

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        dropped, hidden = self._state()
        if tag == "script":
            self.scripts += 1
        if _is_hidden(attrs) and not (dropped or hidden):
            self.hidden_elements += 1
        if tag in BLOCK:
            self.visible.append("\n")
        if tag in VOID:
            return
        self.stack.append((tag, dropped or tag in DROPPED, hidden or _is_hidden(attrs)))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index][0] == tag:
                del self.stack[index:]
                break
        if tag in BLOCK:
            self.visible.append("\n")

    def handle_data(self, data):
        dropped, hidden = self._state()
        if self.stack and self.stack[-1][0] == "title":
            self.title += data
            return
        if dropped:
            return
        (self.hidden if hidden else self.visible).append(data)


def _collapse(text: str) -> str:
    lines = (re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in text.split("\n"))
    return "\n".join(line for line in lines if line)


def html_text(path: Path) -> tuple[str, str, VisibleText]:
    parser = VisibleText()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    visible = _collapse("".join(parser.visible))
    return visible, _collapse("".join(parser.hidden)), parser


def csv_rows(path: Path) -> list[str]:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        return ["\n".join(f"{h}: {v}" for h, v in zip(header, row)) for row in reader if row]


_PDF_STRING = re.compile(rb"\((?:\\.|[^\\)])*\)\s*Tj")


def _unescape_pdf(raw: bytes) -> str:
    out = bytearray()
    i = 0
    while i < len(raw):
        b = raw[i]
        if b == 0x5C and i + 1 < len(raw):  # backslash
            nxt = raw[i + 1]
            mapping = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("f"): 12}
            if nxt in mapping:
                out.append(mapping[nxt])
                i += 2
            elif 0x30 <= nxt <= 0x37:
                octal = re.match(rb"[0-7]{1,3}", raw[i + 1:i + 4]).group(0)
                out.append(int(octal, 8) & 0xFF)
                i += 1 + len(octal)
            else:
                out.append(nxt)
                i += 2
        else:
            out.append(b)
            i += 1
    return out.decode("cp1252")


def pdf_pages(path: Path) -> list[str]:
    """Text lines of each page, in page-tree order. Reads the uncompressed (or Flate) content
    streams of text-only PDFs such as those examples/tools/make_pdf.py writes."""
    data = path.read_bytes()
    if not data.startswith(b"%PDF-"):
        raise ValueError("not a PDF (no %PDF- header)")
    objects = {int(m.group(1)): m.group(2) for m in
               re.finditer(rb"(\d+) 0 obj\s*(.*?)\s*endobj", data, re.S)}
    root = re.search(rb"/Root (\d+) 0 R", data)
    if not root:
        raise ValueError("no /Root in the trailer")
    pages_ref = re.search(rb"/Pages (\d+) 0 R", objects[int(root.group(1))])
    if not pages_ref:
        raise ValueError("the catalog has no /Pages")

    def leaves(number: int) -> list[int]:
        body = objects[number]
        if re.search(rb"/Type\s*/Pages\b", body):
            kids = re.search(rb"/Kids\s*\[(.*?)\]", body, re.S).group(1)
            return [leaf for kid in re.findall(rb"(\d+) 0 R", kids) for leaf in leaves(int(kid))]
        return [number]

    pages = []
    for page in leaves(int(pages_ref.group(1))):
        contents = re.search(rb"/Contents (\d+) 0 R", objects[page])
        stream_obj = objects[int(contents.group(1))]
        stream = re.search(rb"stream\r?\n(.*?)\r?\nendstream", stream_obj, re.S).group(1)
        if b"/FlateDecode" in stream_obj.split(b"stream", 1)[0]:
            stream = zlib.decompress(stream)
        lines = [_unescape_pdf(m.group(0)[1:m.group(0).rindex(b")")]) for m in
                 _PDF_STRING.finditer(stream)]
        pages.append("\n".join(lines))
    return pages


class Corpus:
    """The corpus folder: documents by ref (`path`, `path#row=N`, `path#page=N`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.documents: dict[str, str] = {}
        self.hidden: dict[str, str] = {}
        self.files: dict[str, Path] = {}
        self.errors: list[str] = []
        self.file_words: dict[str, int] = {}
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = path.relative_to(root).as_posix()
            self.files[rel] = path
            suffix = path.suffix.lower()
            try:
                if suffix in (".md", ".txt"):
                    text = path.read_text(encoding="utf-8")
                    self.documents[rel] = text
                elif suffix in (".html", ".htm"):
                    visible, hidden, parser = html_text(path)
                    self.documents[rel] = visible
                    self.hidden[rel] = hidden
                    if not parser.title.strip():
                        self.errors.append(f"{rel}: no <title>")
                    if parser.scripts == 0 or parser.hidden_elements == 0:
                        self.errors.append(f"{rel}: needs a <script> and a hidden element")
                    text = visible
                elif suffix == ".csv":
                    rows = csv_rows(path)
                    for n, row in enumerate(rows, start=1):
                        self.documents[f"{rel}#row={n}"] = row
                    text = "\n".join(rows)
                elif suffix == ".pdf":
                    pages = pdf_pages(path)
                    for n, page in enumerate(pages, start=1):
                        self.documents[f"{rel}#page={n}"] = page
                    text = "\n".join(pages)
                else:
                    self.errors.append(f"{rel}: unsupported file type in the corpus")
                    continue
            except (ValueError, KeyError, AttributeError, UnicodeDecodeError) as err:
                self.errors.append(f"{rel}: cannot read ({err})")
                continue
            self.file_words[rel] = len(text.split())

    def formats(self) -> Counter:
        return Counter(Path(rel).suffix.lower().lstrip(".") for rel in self.files)


# ---------------------------------------------------------------------------------------------


def check_golden(golden_path: Path) -> tuple[list[str], list[str]]:
    errors: list[str] = []
    report: list[str] = []
    try:
        golden = load_golden(golden_path)
    except (YamlSubsetError, OSError) as err:
        return [str(err)], report
    for key in ("name", "corpus", "collection", "chunking", "cases"):
        if key not in golden:
            errors.append(f"{golden_path}: missing top-level `{key}`")
    if errors:
        return errors, report
    corpus = Corpus((golden_path.parent / golden["corpus"]).resolve())
    errors.extend(f"corpus/{e}" for e in corpus.errors)

    cases = golden["cases"]
    seen: set[str] = set()
    tags = Counter()
    csv_pdf_cases = 0
    for index, case in enumerate(cases, start=1):
        cid = case.get("id", f"case #{index}")
        missing = [field for field in REQUIRED if field not in case]
        unknown = sorted(set(case) - set(REQUIRED))
        if missing or unknown:
            errors.append(f"{cid}: missing fields {missing}, unknown fields {unknown}")
            continue
        if cid in seen:
            errors.append(f"{cid}: duplicate id")
        seen.add(cid)
        if not isinstance(case["relevant"], list) or not case["relevant"]:
            errors.append(f"{cid}: `relevant` must be a non-empty list")
            continue
        if not isinstance(case["expected_substrings"], list) or not case["expected_substrings"]:
            errors.append(f"{cid}: `expected_substrings` must be a non-empty list")
            continue
        bad_tags = set(case["tags"]) - KNOWN_TAGS
        if bad_tags:
            errors.append(f"{cid}: unknown tags {sorted(bad_tags)} (known: {sorted(KNOWN_TAGS)})")
        tags.update(case["tags"])
        if "multi-doc" in case["tags"] and len(case["relevant"]) < 2:
            errors.append(f"{cid}: tagged multi-doc but names {len(case['relevant'])} relevant ref")
        if any(re.search(r"\.(csv|pdf)#", ref) for ref in case["relevant"]):
            csv_pdf_cases += 1
        texts = []
        for ref in case["relevant"]:
            base = ref.split("#", 1)[0]
            if base not in corpus.files:
                errors.append(f"{cid}: relevant ref {ref!r} names no file under the corpus")
                continue
            if base.endswith((".csv", ".pdf")) and "#" not in ref:
                errors.append(f"{cid}: {ref!r} needs a #row=N or #page=N suffix")
                continue
            if ref not in corpus.documents:
                errors.append(f"{cid}: {ref!r} does not exist (no such row or page)")
                continue
            texts.append((ref, corpus.documents[ref], corpus.hidden.get(ref, "")))
        for expected in case["expected_substrings"]:
            if any(expected in text for _, text, _ in texts):
                continue
            hidden_in = [ref for ref, _, hidden in texts if expected in hidden]
            if hidden_in:
                errors.append(f"{cid}: {expected!r} occurs only in hidden HTML of {hidden_in}")
            elif texts:
                errors.append(f"{cid}: {expected!r} occurs verbatim in none of {case['relevant']}")

    if len(cases) < MINIMUM_CASES:
        errors.append(f"{len(cases)} cases; at least {MINIMUM_CASES} are promised")
    for tag, minimum in MINIMUM_PER_TAG.items():
        if tags[tag] < minimum:
            errors.append(f"{tags[tag]} cases tagged {tag}; at least {minimum} are promised")
    if csv_pdf_cases < MINIMUM_CSV_PDF_CASES:
        errors.append(f"{csv_pdf_cases} cases over CSV rows or PDF pages; at least "
                      f"{MINIMUM_CSV_PDF_CASES} are promised")
    if len(corpus.files) < MINIMUM_DOCUMENTS:
        errors.append(f"{len(corpus.files)} corpus files; at least {MINIMUM_DOCUMENTS} are promised")

    formats = corpus.formats()
    words = sorted(corpus.file_words.items(), key=lambda item: item[1])
    prose = [w for rel, w in corpus.file_words.items() if not rel.endswith(".csv")]
    report.append(f"corpus: {len(corpus.files)} files ({', '.join(f'{n} {k}' for k, n in sorted(formats.items()))}), "
                  f"{len(corpus.documents)} loader documents (CSV rows and PDF pages counted separately)")
    report.append(f"words per file: min {words[0][1]} ({words[0][0]}), max {words[-1][1]} ({words[-1][0]}); "
                  f"prose files below 150 words: {sum(1 for w in prose if w < 150)}")
    report.append(f"cases: {len(cases)}; by tag: {', '.join(f'{t} {n}' for t, n in sorted(tags.items()))}; "
                  f"over CSV rows / PDF pages: {csv_pdf_cases}")
    return errors, report


def check_beir(folder: Path) -> tuple[list[str], list[str]]:
    errors: list[str] = []

    def read_jsonl(name: str, fields: tuple[str, ...]) -> dict[str, dict]:
        out: dict[str, dict] = {}
        path = folder / name
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                errors.append(f"{path}:{number}: invalid JSON ({err})")
                continue
            for field in fields:
                if not isinstance(record.get(field), str) or not record[field].strip():
                    errors.append(f"{path}:{number}: `{field}` missing or empty")
            if record.get("_id") in out:
                errors.append(f"{path}:{number}: duplicate _id {record.get('_id')!r}")
            out[record.get("_id")] = record
        return out

    try:
        corpus = read_jsonl("corpus.jsonl", ("_id", "title", "text"))
        queries = read_jsonl("queries.jsonl", ("_id", "text"))
        qrels_text = (folder / "qrels" / "test.tsv").read_text(encoding="utf-8")
    except OSError as err:
        return [f"{folder}: {err}"], []
    lines = qrels_text.splitlines()
    if not lines or lines[0].split() != ["query-id", "corpus-id", "score"]:
        errors.append(f"{folder}/qrels/test.tsv: first line must be the header query-id corpus-id score")
    judged = Counter()
    grades = Counter()
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            errors.append(f"qrels/test.tsv:{number}: expected 3 tab-separated fields")
            continue
        qid, did, score = parts
        if qid not in queries:
            errors.append(f"qrels/test.tsv:{number}: unknown query-id {qid!r}")
        if did not in corpus:
            errors.append(f"qrels/test.tsv:{number}: unknown corpus-id {did!r}")
        if score not in ("0", "1", "2"):
            errors.append(f"qrels/test.tsv:{number}: score {score!r} is not 0, 1 or 2")
        elif score != "0":
            judged[qid] += 1
        grades[score] += 1
    for qid in queries:
        if judged[qid] == 0:
            errors.append(f"query {qid!r} has no relevant document in qrels/test.tsv")
    report = [f"beir-mini: {len(corpus)} documents, {len(queries)} queries, "
              f"{sum(grades.values())} judgements (scores: {dict(sorted(grades.items()))})"]
    return errors, report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--golden", type=Path, default=HERE / "golden.yaml")
    parser.add_argument("--beir", type=Path, default=HERE / "beir-mini")
    args = parser.parse_args(argv)
    errors, report = check_golden(args.golden)
    beir_errors, beir_report = check_beir(args.beir)
    for line in report + beir_report:
        print(line)
    for error in errors + beir_errors:
        print(f"error: {error}", file=sys.stderr)
    if errors or beir_errors:
        print(f"{len(errors) + len(beir_errors)} problem(s) found", file=sys.stderr)
        return 1
    print("ok: every relevant ref exists and every expected substring occurs in a relevant document")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
