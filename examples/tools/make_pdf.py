#!/usr/bin/env python3
"""Writes small, valid, text-only PDFs by hand (standard library only).

The example crews and the evaluation corpus need real multi-page PDFs whose text a PDF loader
can extract page by page. This script lays out a plain-text source into pages and writes the PDF
syntax itself: a catalog, a page tree, one page object and one uncompressed content stream per
page, text objects set in the standard Helvetica / Helvetica-Bold / Courier fonts
(WinAnsiEncoding), a document information dictionary and a cross-reference table with exact byte
offsets. Output is deterministic: the same source always gives the same bytes.

Source format (UTF-8 text; characters outside Windows-1252 are refused):

    %% output: ../crews/knowledge/research/report.pdf   (relative to the source file)
    %% title: Document title                             (document info + page footer)
    # Heading                  -> Helvetica-Bold 16 pt
    ## Subheading              -> Helvetica-Bold 12.5 pt
    - bullet item              -> wrapped with a hanging indent
        preformatted line      -> Courier 9 pt, never wrapped (four leading spaces)
    blank line                 -> paragraph break
    <<<page>>>                 -> page break (pages are explicit so `#page=N` refs stay stable)

Any other line is body text (Helvetica 10.5 pt), wrapped to the text width with the real
Helvetica character widths. A page whose content does not fit is an error naming the source and
the page: split it with `<<<page>>>`.

Usage:
    make_pdf.py                      regenerate every examples/tools/pdf-src/*.txt
    make_pdf.py SOURCE.txt [OUT.pdf] one source (OUT defaults to its `%% output:` line)
"""

from __future__ import annotations

import sys
from pathlib import Path

PAGE_WIDTH, PAGE_HEIGHT = 612, 792  # US Letter, points
MARGIN_X, MARGIN_TOP, MARGIN_BOTTOM = 72, 72, 72
TEXT_WIDTH = PAGE_WIDTH - 2 * MARGIN_X
PAGE_BREAK = "<<<page>>>"

# Advance widths (1/1000 em) of the standard Helvetica font for ASCII 32..126 (Adobe AFM).
_HELVETICA = [
    278, 278, 355, 556, 556, 889, 667, 191, 333, 333, 389, 584, 278, 333, 278, 278,  # ' '..'/'
    556, 556, 556, 556, 556, 556, 556, 556, 556, 556, 278, 278, 584, 584, 584, 556,  # '0'..'?'
    1015, 667, 667, 722, 722, 667, 611, 778, 722, 278, 500, 667, 556, 833, 722, 778,  # '@'..'O'
    667, 778, 722, 667, 611, 722, 667, 944, 667, 667, 611, 278, 278, 278, 469, 556,  # 'P'..'_'
    333, 556, 556, 500, 556, 556, 278, 556, 556, 222, 222, 500, 222, 833, 556, 556,  # '`'..'o'
    556, 556, 333, 500, 278, 556, 500, 722, 500, 500, 500, 334, 260, 334, 584,  # 'p'..'~'
]

# (font resource, PostScript name, size, leading, space before) per line style.
STYLES = {
    "h1": ("F2", "Helvetica-Bold", 16.0, 22.0, 8.0),
    "h2": ("F2", "Helvetica-Bold", 12.5, 17.0, 6.0),
    "body": ("F1", "Helvetica", 10.5, 14.0, 0.0),
    "pre": ("F3", "Courier", 9.0, 11.5, 0.0),
    "footer": ("F1", "Helvetica", 8.0, 10.0, 0.0),
}
FONTS = {"F1": "Helvetica", "F2": "Helvetica-Bold", "F3": "Courier"}
PARAGRAPH_GAP = 6.0


class SourceError(Exception):
    """A PDF source that cannot be laid out; the message names the file and what to fix."""


def text_width(text: str, style: str) -> float:
    """Width in points of `text` set in `style` (bold is approximated as 5% wider)."""
    _, font, size, _, _ = STYLES[style]
    if font == "Courier":
        return len(text) * 600 * size / 1000
    units = sum(_HELVETICA[ord(c) - 32] if 32 <= ord(c) <= 126 else 556 for c in text)
    if font == "Helvetica-Bold":
        units *= 1.05
    return units * size / 1000


def wrap(text: str, style: str, width: float) -> list[str]:
    """Greedy word wrap to `width` points."""
    lines: list[str] = []
    current = ""
    for word in text.split():
        candidate = f"{current} {word}" if current else word
        if current and text_width(candidate, style) > width:
            lines.append(current)
            current = word
        else:
            current = candidate
    if current:
        lines.append(current)
    return lines


def escape(text: str) -> bytes:
    """A PDF literal string body in WinAnsi (cp1252) with `\\`, `(` and `)` escaped."""
    raw = text.encode("cp1252")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def parse_source(path: Path) -> tuple[dict[str, str], list[list[str]]]:
    """Header fields (`%% key: value`) and the raw lines of each page."""
    header: dict[str, str] = {}
    pages: list[list[str]] = [[]]
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("%%"):
            key, sep, value = line[2:].partition(":")
            if not sep:
                raise SourceError(f"{path}:{number}: header lines read `%% key: value`")
            header[key.strip()] = value.strip()
        elif line.strip() == PAGE_BREAK:
            pages.append([])
        else:
            try:
                line.encode("cp1252")
            except UnicodeEncodeError as err:
                raise SourceError(
                    f"{path}:{number}: character {line[err.start]!r} is outside Windows-1252; "
                    "replace it (the standard PDF fonts cannot show it)"
                ) from None
            pages[-1].append(line)
    pages = [page for page in pages if any(line.strip() for line in page)]
    if not pages:
        raise SourceError(f"{path}: no text; write at least one page")
    return header, pages


def layout_page(lines: list[str]) -> list[tuple[str, str]]:
    """(style, text) per output line; `("gap", "")` for paragraph spacing."""
    out: list[tuple[str, str]] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            out.extend(("body", part) for part in wrap(" ".join(paragraph), "body", TEXT_WIDTH))
            out.append(("gap", ""))
            paragraph.clear()

    for line in lines:
        if not line.strip():
            flush()
        elif line.startswith("## "):
            flush()
            out.append(("h2", line[3:].strip()))
        elif line.startswith("# "):
            flush()
            out.append(("h1", line[2:].strip()))
        elif line.startswith("    "):
            flush()
            out.append(("pre", line[4:].rstrip()))
        elif line.startswith("- "):
            flush()
            parts = wrap(line[2:], "body", TEXT_WIDTH - 14)
            out.append(("body", "- " + parts[0]))
            out.extend(("body-indent", part) for part in parts[1:])
        else:
            paragraph.append(line.strip())
    flush()
    return out


def content_stream(page_lines: list[tuple[str, str]], footer: str, where: str) -> bytes:
    """The page's content stream: one text object, absolute positions per line."""
    ops = [b"BT"]
    y = PAGE_HEIGHT - MARGIN_TOP
    for style, text in page_lines:
        if style == "gap":
            y -= PARAGRAPH_GAP
            continue
        indent = 14 if style == "body-indent" else 0
        style = "body" if style == "body-indent" else style
        resource, _, size, leading, space_before = STYLES[style]
        y -= space_before + leading
        if y < MARGIN_BOTTOM:
            raise SourceError(f"{where}: the page overflows; add a `{PAGE_BREAK}` line earlier")
        ops.append(
            b"/%s %s Tf 1 0 0 1 %d %s Tm (%s) Tj"
            % (resource.encode(), _num(size), MARGIN_X + indent, _num(y), escape(text))
        )
    resource, _, size, _, _ = STYLES["footer"]
    footer_x = PAGE_WIDTH - MARGIN_X - text_width(footer, "footer")
    ops.append(
        b"/%s %s Tf 1 0 0 1 %s 40 Tm (%s) Tj"
        % (resource.encode(), _num(size), _num(footer_x), escape(footer))
    )
    ops.append(b"ET")
    return b"\n".join(ops) + b"\n"


def _num(value: float) -> bytes:
    return (b"%.2f" % value).rstrip(b"0").rstrip(b".")


def _pdf_string(text: str) -> bytes:
    return b"(" + escape(text) + b")"


def build_pdf(title: str, pages: list[list[str]], where: str) -> bytes:
    """The complete PDF file for the given pages."""
    objects: list[bytes] = []  # objects[i] is object number i + 1

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in once the page tree number is known
    pages_obj = add(b"")
    font_ids = {
        name: add(
            b"<< /Type /Font /Subtype /Type1 /BaseFont /%s /Encoding /WinAnsiEncoding >>"
            % base.encode()
        )
        for name, base in FONTS.items()
    }
    info = add(
        b"<< /Title %s /Producer (orkeon examples/tools/make_pdf.py) >>" % _pdf_string(title)
    )
    resources = b"<< /Font << %s >> >>" % b" ".join(
        b"/%s %d 0 R" % (name.encode(), number) for name, number in font_ids.items()
    )
    page_ids = []
    for index, page in enumerate(pages, start=1):
        footer = f"{title} - page {index} of {len(pages)}"
        stream = content_stream(layout_page(page), footer, f"{where} page {index}")
        content = add(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        page_ids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 %d %d] /Resources %s /Contents %d 0 R >>"
                % (pages_obj, PAGE_WIDTH, PAGE_HEIGHT, resources, content)
            )
        )
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % pages_obj
    objects[pages_obj - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % number for number in page_ids),
        len(page_ids),
    )

    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root %d 0 R /Info %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        catalog,
        info,
        xref_at,
    )
    return bytes(out)


def render(source: Path, output: Path | None = None) -> Path:
    """Writes the PDF for one source file and returns its path."""
    header, pages = parse_source(source)
    if output is None:
        if "output" not in header:
            raise SourceError(f"{source}: no `%% output:` line and no OUT argument given")
        output = (source.parent / header["output"]).resolve()
    title = header.get("title", source.stem)
    data = build_pdf(title, pages, str(source))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(data)
    return output


def main(argv: list[str]) -> int:
    try:
        if len(argv) > 2:
            raise SourceError("usage: make_pdf.py [SOURCE.txt [OUT.pdf]]")
        if argv:
            targets = [(Path(argv[0]), Path(argv[1]) if len(argv) == 2 else None)]
        else:
            folder = Path(__file__).resolve().parent / "pdf-src"
            targets = [(source, None) for source in sorted(folder.glob("*.txt"))]
            if not targets:
                raise SourceError(f"{folder}: no *.txt sources to render")
        for source, output in targets:
            written = render(source, output)
            print(f"{source} -> {written}")
    except (SourceError, OSError) as err:
        print(f"make_pdf.py: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
