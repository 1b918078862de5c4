"""HTML as a reader sees it (cli/html_text.py): exact text of small pages, real pages, s2b index."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langchain_s2b.cli import commands as cli
from langchain_s2b.cli.commands import main
from langchain_s2b.cli.html_charset import decode
from langchain_s2b.cli.loaders import SkippedFile, read_documents
from langchain_s2b.core.headers import SectionHeaders

LIBFFI = Path(__file__).parent / "data" / "libffi"
KOI8 = '<meta http-equiv="Content-Type" content="text/html; charset=koi8-r"><p>мир</p>'.encode(
    "koi8-r"
)
NODE_OS = b"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>OS | Node.js v22.11.0 Documentation</title></head><body><div id="apicontent">
<h2>OS<span><a class="mark" href="#os" id="os">#</a></span><a aria-hidden="true" class="legacy"
 id="os_os"></a></h2>
<p>The <code>node:os</code> module provides operating system-related utility methods.</p>
<section><h3><code>os.EOL</code><span><a class="mark" href="#oseol" id="oseol">#</a></span><a
 aria-hidden="true" class="legacy" id="os_os_eol"></a></h3>
<p>The operating system-specific end-of-line marker.</p></section>
<h3>Error codes<span><a class="mark" href="#error-codes" id="error-codes">#</a></span><span><a
 class="mark" href="#ERR_X" id="ERR_X">#</a></span></h3><p>A table of them.</p></div></body></html>
"""
"""A page of Node.js's API documentation as its doc tool writes it (v22)."""


def page_text(data: bytes) -> tuple[str, str | None]:
    """The text and title ``s2b index`` reads from a page (``None``: the file name's stem)."""
    (doc,) = read_documents(Path("/docs/untitled.html"), data)
    title = doc.metadata["title"]
    return doc.page_content, None if title == "untitled" else title


def text_of(body: str) -> str:
    return page_text(f"<html><head><title>T</title></head><body>{body}</body></html>".encode())[0]


class TestInlineAndBlocks:
    def test_inline_elements_flow_in_their_sentence(self) -> None:
        page = (
            "<p><code>libffi</code>\nis perfectly <em>happy</em> with <a href='x.html'>links"
            "</a>, <b>bold</b>, <span>spans</span>   and <i>it</i><strong>alics</strong>.</p>"
        )
        assert text_of(page) == "libffi is perfectly happy with links, bold, spans and italics."

    def test_blocks_are_paragraphs(self) -> None:
        page = "<div>One <span>two</span></div><p>Three.</p>Loose text<blockquote>Four</blockquote>"
        assert text_of(page) == "One two\n\nThree.\n\nLoose text\n\nFour"

    def test_br_breaks_the_line(self) -> None:
        assert text_of("<p>a <br> b<br/>c</p>") == "a\nb\nc"

    def test_entities(self) -> None:
        page = "<p>&lt;a&gt; &amp; caf&eacute; &#x2014; &#169;&nbsp;x</p>"
        assert text_of(page) == "<a> & café — ©\xa0x"

    def test_scripts_styles_and_what_is_not_read_are_dropped(self) -> None:
        page = (
            "<style>p{}</style><script>var a = '<p>no</p>';</script><template><p>no</p></template>"
            "<noscript>no</noscript><p>yes</p><form><input value=no><button>no</button>"
            "<select><option>no</option></select><label>kept</label></form>"
            "<p hidden>no</p><p aria-hidden='true'>no</p><p style='display: none'>no</p>"
            "<!-- no --><svg><text>no</text></svg>"
        )
        assert text_of(page) == "yes\n\nkept"


class TestHeadings:
    def test_headings_are_markdown_heading_lines(self) -> None:
        page = "".join(f"<h{n}>Level <em>{n}</em></h{n}><p>Text {n}.</p>" for n in range(1, 7))
        assert text_of(page) == "\n\n".join(
            f"{'#' * n} Level {n}\n\nText {n}." for n in range(1, 7)
        )

    def test_a_heading_is_one_line_without_its_permalink(self) -> None:
        page = (
            "<h2>Install<br>now<a class='headerlink' href='#i'>¶</a></h2><p>Run it.</p>"
            "<p>Before<h3>Inline</h3>after.</p>"
        )
        assert text_of(page) == "## Install now\n\nRun it.\n\nBefore\n\n### Inline\n\nafter."

    def test_a_heading_with_nothing_under_it_goes(self) -> None:
        page = "<h1>Manual</h1><h1>Contents</h1><h2>Empty</h2><h2>Full</h2><p>Body.</p><h3>End</h3>"
        assert text_of(page) == "# Contents\n\n## Full\n\nBody."

    def test_the_title_is_the_title_element_else_the_first_heading(self) -> None:
        assert page_text(b"<title> A \n title </title><h1>H</h1><p>x.</p>")[1] == "A title"
        assert page_text(b"<h2>First <b>heading</b></h2><p>x.</p>") == (
            "## First heading\n\nx.",
            "First heading",
        )
        assert page_text(b"<p>no heading</p>") == ("no heading", None)

    def test_an_svg_title_is_not_the_page_title(self) -> None:
        icon = "<svg viewBox='0 0 10 10'><title>Menu icon</title><path d='M0 0h10'/></svg>"
        formula = "<math><title>x squared</title><mi>x</mi></math>"
        page = f"<html><head></head><body>{icon}<h1>Real title</h1><p>{formula} Body.</p>"
        assert page_text(page.encode()) == ("# Real title\n\nx Body.", "Real title")
        headed = f"<html><head><title>Page</title></head><body>{icon}<h1>H</h1><p>x.</p>"
        assert page_text(headed.encode())[1] == "Page"
        # after the icon, HTML's own <title> is the page's, as document.title reads it
        late = f"<html><body>{icon}<p>x.</p><title>Late title</title></body></html>"
        assert page_text(late.encode()) == ("x.", "Late title")

    def test_a_permalink_mark_is_not_in_the_heading_path(self) -> None:
        text, title = page_text(NODE_OS)
        assert title == "OS | Node.js v22.11.0 Documentation"
        assert text == (
            "## OS\n\n"
            "The node:os module provides operating system-related utility methods.\n\n"
            "### os.EOL\n\n"
            "The operating system-specific end-of-line marker.\n\n"
            "### Error codes\n\n"
            "A table of them."
        )
        headers = SectionHeaders(text, {"title": title})
        at = text.index("The operating system-specific")
        assert headers.outline.path_at(at) == ("OS", "os.EOL")
        assert headers.at(at, len(text)) == "OS | Node.js v22.11.0 Documentation > OS > os.EOL"

    @pytest.mark.parametrize(
        ("heading", "text"),
        [
            # Sphinx, MkDocs: a headerlink class; Go's pkgsite, rustdoc: a mark alone
            ("Install<a class='headerlink' href='#install' title='Link'>¶</a>", "Install"),
            ("func Open <a class='Documentation-idLink' href='#Open'>¶</a>", "func Open"),
            ("Examples<a href='#examples' class='anchor'>§</a>", "Examples"),
            ("<a href='#usage'> 🔗 </a>Usage", "Usage"),
            ("Usage<a href='#usage' aria-label='Direct link'>\u200b</a>", "Usage"),  # Docusaurus
            # GitHub: an octicon (an svg) in an anchor, or an empty anchor
            ("<a class='anchor' href='#setup'><svg><path d='M0'/></svg></a>Setup", "Setup"),
            ("<a id='user-content-setup' class='anchor' href='#setup'></a>Setup", "Setup"),
            # a self-link that is the heading's text (MDN) is its text; so is a mark that
            # links elsewhere, and one that is not alone
            ("<a href='#syntax'>Syntax</a>", "Syntax"),
            ("C<a href='other.html'>#</a>", "C#"),
            ("F<a href='#f'>#1</a>", "F#1"),
            ("A<a href='#x'> # </a>B", "A B"),
        ],
    )
    def test_permalink_variants(self, heading: str, text: str) -> None:
        assert text_of(f"<h2>{heading}</h2><p>x.</p>") == f"## {text}\n\nx."


class TestChrome:
    def test_nav_header_footer_aside_of_the_page_are_dropped(self) -> None:
        page = (
            "<header><p>Site banner</p></header><nav><p>Home</p></nav>"
            "<aside><p>Related stuff</p></aside><main><article><header><h1>Title</h1></header>"
            "<p>Body.</p><aside><p>A note.</p></aside><footer><p>Article footer.</p></footer>"
            "</article></main><div role='navigation'><p>Menu</p></div>"
            "<div role='contentinfo'><p>Foot</p></div><footer><p>Page footer</p></footer>"
        )
        assert text_of(page) == "# Title\n\nBody.\n\nA note.\n\nArticle footer."

    def test_gnu_info_navigation_and_menus_are_dropped(self) -> None:
        page = (
            "<div class='header'><p>Next: <a href='b.html'>Using libffi</a>, Previous: "
            "<a href='index.html'>libffi</a>, Up: <a href='index.html'>libffi</a> &nbsp; "
            "[<a href='Index.html'>Index</a>]</p></div><hr><h2>1 What is libffi?</h2>"
            "<p>Some <a href='x.html'>programs</a> may not know it.</p>"
            "<ul class='section-toc'><li><a href='a.html'>The Basics</a></li>"
            "<li><a href='b.html'>Simple Example</a></li></ul>"
        )
        assert text_of(page) == "## 1 What is libffi?\n\nSome programs may not know it."

    def test_sentences_of_links_and_mail_addresses_are_text(self) -> None:
        page = (
            "<p>Use <a href='a'>ffi_call</a> <a href='b'>here</a>.</p>"  # a sentence
            "<p><a href='a'>See</a> <a href='b'>also</a> this</p>"  # two thirds links: a bar
            "<ul><li>Neil &lt;<a href='mailto:n@d.org'>n@d.org</a>&gt;</li></ul>"
            "<p>The <a href='t.html'><code>ffi_type</code></a> struct</p>"
        )
        assert text_of(page) == "Use ffi_call here.\n\n- Neil <n@d.org>\n\nThe ffi_type struct"


class TestListsPreTables:
    def test_lists_one_paragraph_an_item_a_line(self) -> None:
        page = (
            "<p>Before.</p><ul><li>one<li>two <p>more of two</p><ol start='3'><li>three"
            "<li>four</ol></li></ul><p>After.</p>"
        )
        assert text_of(page) == (
            "Before.\n\n- one\n- two\n  more of two\n  3. three\n  4. four\n\nAfter."
        )

    def test_pre_keeps_its_lines_and_spaces(self) -> None:
        page = "<p>Code:</p><pre>\nint main()\n{\n  <b>return</b>  0;\n\n}\n</pre><p>Done.</p>"
        assert text_of(page) == "Code:\n\nint main()\n{\n  return  0;\n\n}\n\nDone."

    def test_a_data_table_is_rows_of_cells(self) -> None:
        page = (
            "<table><caption>Types</caption><tr><th>Name</th><th>Size</th></tr>"
            "<tr><td><p>ffi_type_uint8</p></td><td>1</td></tr>"
            "<tr><td>ffi_type_double</td><td>8<br>bytes</td></tr></table><p>After.</p>"
        )
        assert text_of(page) == (
            "Types\nName | Size\nffi_type_uint8 | 1\nffi_type_double | 8 bytes\n\nAfter."
        )

    def test_a_layout_table_is_the_blocks_it_holds(self) -> None:
        one_column = "<table><tr><td>First.</td></tr><tr><td>Second.</td></tr></table>"
        paragraphs = "<table><tr><td><p>A.</p><p>B.</p></td><td>C.</td></tr></table>"
        nested = "<table><tr><td><table><tr><td>x</td><td>y</td></tr></table></td><td>z</td>"
        assert text_of(one_column) == "First.\n\nSecond."
        assert text_of(paragraphs) == "A.\n\nB.\n\nC."
        assert text_of(nested + "</tr></table>") == "x | y\n\nz"


def whatwg_utf8(data: bytes) -> str:
    """The WHATWG Encoding standard's UTF-8 decoder step by step, errors as U+FFFD: a reference."""
    out: list[str] = []
    code = needed = seen = 0
    lower, upper = 0x80, 0xBF
    at = 0
    while at < len(data):
        byte = data[at]
        if needed == 0:
            at += 1
            if byte <= 0x7F:
                out.append(chr(byte))
            elif 0xC2 <= byte <= 0xDF:
                needed, code = 1, byte & 0x1F
            elif 0xE0 <= byte <= 0xEF:
                lower, upper = (0xA0 if byte == 0xE0 else 0x80), (0x9F if byte == 0xED else 0xBF)
                needed, code = 2, byte & 0xF
            elif 0xF0 <= byte <= 0xF4:
                lower, upper = (0x90 if byte == 0xF0 else 0x80), (0x8F if byte == 0xF4 else 0xBF)
                needed, code = 3, byte & 0x7
            else:
                out.append("\ufffd")
            continue
        if not lower <= byte <= upper:  # an error; the byte is read again ("prepend")
            code = needed = seen = 0
            lower, upper = 0x80, 0xBF
            out.append("\ufffd")
            continue
        at += 1
        lower, upper = 0x80, 0xBF
        code, seen = (code << 6) | (byte & 0x3F), seen + 1
        if seen == needed:
            out.append(chr(code))
            code = needed = seen = 0
    if needed:
        out.append("\ufffd")
    return "".join(out)


_CODE_POINT = st.integers(0, 0x10FFFF).map(lambda c: chr(c).encode("utf-8", "surrogatepass"))
UTF8_PIECES = st.lists(
    st.one_of(
        _CODE_POINT,  # whole sequences, surrogates' among them
        st.tuples(_CODE_POINT, st.integers(1, 3)).map(lambda p: p[0][: p[1]]),  # cut short
        st.integers(0x80, 0xFF).map(lambda b: bytes([b])),  # a stray byte
    ),
    max_size=40,
).map(b"".join)
"""Byte strings that are mostly UTF-8's edge cases: sequences whole, cut short, stray bytes."""
TEXT_PIECES = UTF8_PIECES.map(
    lambda b: bytes(c for c in b if c > 0x20 and c not in b"<>&")  # no markup, no spaces
)


AS_UTF8 = "café \ufffd\ufffd"
"""``caf\xc3\xa9 \x81\xe9`` as UTF-8: 0x81 and 0xE9 (before ``<``) are not UTF-8."""
AS_1252 = "cafÃ© \x81é"
"""The same bytes as windows-1252 (0x81 is U+0081 in WHATWG's index)."""
UNDECLARED = AS_1252
"""Undeclared and not UTF-8: windows-1252."""


class TestEncodings:
    @pytest.mark.parametrize(
        ("data", "text"),
        [
            ("<p>café</p>".encode(), "café"),  # undeclared UTF-8
            ("<meta charset='iso-8859-1'><p>café “q”</p>".encode("cp1252"), "café “q”"),
            (KOI8, "мир"),
            # declared, not what it declares: the declaration wins, what fails is U+FFFD
            ("<meta charset='utf-8'><p>café</p>".encode("cp1252"), "caf\ufffd"),
            ("<meta charset='utf-16'><p>café</p>".encode(), "café"),  # as WHATWG says: UTF-8
            ("<meta charset='x-unknown'><p>café</p>".encode(), "café"),
            (b"\xff\xfe" + "<p>café</p>".encode("utf-16-le"), "café"),
            (b"\xef\xbb\xbf<p>caf\xc3\xa9</p>", "café"),
            # undeclared, not UTF-8: windows-1252, whose 0x81 is U+0081 in WHATWG's index
            (b"<p>caf\xe9 \x81</p>", "café \x81"),
            # single-byte encodings as WHATWG's indexes have them, where Python's tables differ
            (b"<meta charset=koi8-u><p>\xae\xbe</p>", "\u045e\u040e"),  # KOI8-RU's
            (b"<meta charset=windows-1255><p>\xca</p>", "\u05ba"),
            (b"<meta charset=windows-1253><p>\x81\xaa</p>", "\x81\ufffd"),  # 0xAA: none
        ],
    )
    def test_decoded_as_a_browser_would(self, data: bytes, text: str) -> None:
        assert page_text(data)[0] == text

    def test_one_stray_byte_costs_one_character(self) -> None:
        page = (
            b'<html><head><meta charset="utf-8"><title>Caf\xc3\xa9s</title></head><body>'
            b"<p>caf\xc3\xa9 au lait, cr\xc3\xa8me br\xc3\xbbl\xc3\xa9e</p>"
            b"<p>one stray \xff byte</p></body></html>"
        )
        assert page_text(page) == (
            "café au lait, crème brûlée\n\none stray \ufffd byte",
            "Cafés",
        )

    @pytest.mark.parametrize(
        ("head", "text"),
        [
            # WHATWG labels, not Python's: these are UTF-8, windows-1252, windows-1254
            (b"<meta charset=utf8>", AS_UTF8),
            (b"<meta charset=' UNICODE-1-1-UTF-8 '>", AS_UTF8),
            (b"<meta charset=ascii>", AS_1252),
            (b"<meta charset=latin1>", AS_1252),
            (b"<meta charset=iso-8859-9>", AS_1252),  # 1254: the same letters here
            # http-equiv: content's charset counts with the pragma only
            (b"<meta http-equiv='Content-Type' content='text/html;charset=\"utf-8\"'>", AS_UTF8),
            (b"<meta content='text/html; charset=utf-8'>", UNDECLARED),
            # what the prescan skips: comments, other tags' attribute values
            (b"<!-- <meta charset=utf-8> -->", UNDECLARED),
            (b"<div title='<meta charset=utf-8>'>", UNDECLARED),
            # labels browsers do not know are no declaration (Python knows them all)
            (b"<meta charset=utf-7>", UNDECLARED),
            (b"<meta charset=base64>", UNDECLARED),
            (b"<meta charset=rot13>", UNDECLARED),
            # the first declaration that names an encoding wins
            (b"<meta charset=nonsense><meta charset=utf-8><meta charset=ascii>", AS_UTF8),
            # an XML declaration counts where it starts the page, after any <meta>
            (b"<?xml version='1.0' encoding='UTF-8'?>", AS_UTF8),
            (b"<?xml version='1.0' encoding='UTF-8'?><meta charset=ascii>", AS_1252),
            (b" <?xml version='1.0' encoding='UTF-8'?>", UNDECLARED),
            (b"<meta charset=x-user-defined>", AS_1252),  # a <meta> naming it: 1252
        ],
    )
    def test_declarations_as_whatwg_reads_them(self, head: bytes, text: str) -> None:
        assert page_text(head + b"<p>caf\xc3\xa9 \x81\xe9</p>")[0] == text

    def test_an_encoding_browsers_refuse_skips_the_file(self) -> None:
        with pytest.raises(SkippedFile) as raised:
            page_text(b"<meta charset=' ISO-2022-KR'><p>caf\x1b$)C</p>")
        assert str(raised.value) == (
            "not readable HTML (it declares charset 'iso-2022-kr', which browsers refuse to "
            "decode (WHATWG's replacement encoding); any other charset is read)"
        )

    @given(body=UTF8_PIECES)
    def test_any_bytes_declared_utf8_decode_as_a_browser_would(self, body: bytes) -> None:
        declaration = b'<!DOCTYPE html><meta charset="utf-8">'
        # Python's "replace" is the standard's decoder (U+FFFD per maximal subpart) ...
        assert body.decode("utf-8", "replace") == whatwg_utf8(body)
        # ... and a page declared UTF-8 is decoded by it, whatever its bytes
        assert decode(declaration + body) == whatwg_utf8(declaration + body)

    @given(body=TEXT_PIECES)
    def test_the_text_of_a_page_declared_utf8_is_its_bytes_as_a_browser_reads_them(
        self, body: bytes
    ) -> None:
        page = b'<html><head><meta charset="utf-8"></head><body><p>' + body + b"</p></body></html>"
        assert page_text(page)[0] == whatwg_utf8(body)

    def test_the_standards_example_of_maximal_subparts(self) -> None:
        # Unicode 15, table 3-8: one U+FFFD for each maximal subpart of an ill-formed sequence
        data = b"\x61\xf1\x80\x80\xe1\x80\xc2\x62\x80\x63\x80\xbf\x64"
        expected = "a\ufffd\ufffd\ufffdb\ufffdc\ufffd\ufffdd"
        assert whatwg_utf8(data) == expected
        assert decode(b"<meta charset=utf-8>" + data) == "<meta charset=utf-8>" + expected

    def test_decode_alone(self) -> None:
        assert decode(b"\xfe\xff\x00a") == "a"
        assert decode(b"<\x00?\x00x\x00m\x00") == "<?xm"  # UTF-16 without a BOM, as WHATWG says


class TestHostile:
    def test_deep_nesting_is_read_without_recursion(self) -> None:
        assert page_text(b"<div>" * 100_000 + b"deep" + b"</div>" * 100_000) == ("deep", None)
        assert page_text(b"<b><i>" * 50_000 + b"deep") == ("deep", None)

    def test_deeply_nested_lists_stop_indenting(self) -> None:
        text = page_text(b"<ul><li>x" * 10_000)[0]
        lines = text.split("\n")
        assert len(lines) == 10_000
        assert lines[:2] == ["- x", "  - x"]
        assert set(lines[8:]) == {"                - x"}

    def test_broken_markup(self) -> None:
        page = b"<p>one<p>two</b></i><div>three</p>four<li>five<td>six</table></html><p>seven"
        # as libxml2 repairs it: a stray </p> is dropped, an <li> outside a list is an item
        assert page_text(page)[0] == "one\n\ntwo\n\nthreefour\n\n- five\n\n  six\n\nseven"

    def test_garbage_and_empty_pages(self) -> None:
        assert page_text(b"") == ("", None)
        assert page_text(b" \n\t") == ("", None)
        assert page_text(b"<p>a\x00b</p>") == ("a\ufffdb", None)
        text, _ = page_text(bytes(range(256)) * 100)
        assert "\x01" in text

    def test_a_50_mb_page(self) -> None:
        text, _ = page_text(b"<html><body><p>" + b"word " * 10_000_000 + b"</p><pre>a\n b</pre>")
        assert len(text) == 5 * 10_000_000 - 1 + 2 + 4
        assert text.endswith("word word\n\na\n b")


class TestRealPages:
    def test_a_texinfo_page(self) -> None:
        doc = read_documents(
            LIBFFI / "Thread-Safety.html", (LIBFFI / "Thread-Safety.html").read_bytes()
        )
        assert len(doc) == 1
        assert doc[0].metadata["title"] == (
            "Thread Safety (libffi: the portable foreign function interface library)"
        )
        assert doc[0].page_content == (
            "### 2.7 Thread Safety\n\n"
            "libffi is not completely thread-safe. However, many parts are, and if you follow "
            "some simple rules, you can use it safely in a multi-threaded program.\n\n"
            "- ffi_prep_cif may modify the ffi_type objects passed to it. It is best to ensure "
            "that only a single thread prepares a given ffi_cif at a time.\n"
            "- On some platforms, ffi_prep_cif may modify the size and alignment of some types, "
            "depending on the chosen ABI. On these platforms, if you switch between ABIs, you "
            "must ensure that there is only one call to ffi_prep_cif at a time.\n"
            "  Currently the only affected platform is PowerPC and the only affected type is "
            "long double."
        )

    def test_pages_of_navigation_only_have_no_text(self) -> None:
        for name in ("Index.html", "Types.html", "Using-libffi.html"):
            assert page_text((LIBFFI / name).read_bytes())[0] == "", name

    def test_the_manual_has_no_navigation_left(self) -> None:
        for path in sorted(LIBFFI.glob("*.html")):
            text = page_text(path.read_bytes())[0]
            assert not re.search(r"\b(Next|Previous|Up):", text), path.name
            assert "\n" not in text or "\n\n" in text, path.name


@pytest.fixture
def fake_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EMBEDDING_ENV, "fake")


def _query(capsys: pytest.CaptureFixture[str], store: Path, question: str) -> list[dict[str, Any]]:
    argv = ["query", question, "--store", str(store), "--json", "-k", "3", "--mode", "parent"]
    assert main(argv) == 0  # parent mode: the sections of the pages
    results: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["results"]
    return results


@pytest.mark.usefixtures("fake_embedding")
class TestIndexAndQuery:
    def test_a_manual_is_indexed_as_read(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        docs, store = tmp_path / "docs", tmp_path / "s"
        shutil.copytree(LIBFFI, docs)
        (docs / "README.md").unlink()
        # without headers: the ranking below is the text's own (with them, every leaf also
        # carries "libffi > section", and "What is libffi?" finds the section of that name)
        assert main(["index", str(docs), "--store", str(store), "--no-headers"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"indexed 11 file(s) into {store}: 11 added, 0 updated, 0 removed")
        assert "8 document(s)" in out  # Index, Types and Using-libffi are navigation only
        sources = {name: read_documents(docs / name, (docs / name).read_bytes())[0].page_content
                   for name in ("index.html", "Introduction.html", "Thread-Safety.html",
                                "Primitive-Types.html", "The-Basics.html")}  # fmt: skip
        results = _query(capsys, store, "What is libffi?")
        names = [Path(r["metadata"]["source"]).name for r in results]
        assert names == ["index.html", "Introduction.html", "Primitive-Types.html"]
        top = results[0]["metadata"]["matches"][0]
        assert sources["index.html"][top["start"] : top["end"]] == "# libffi\n\n"  # not licence
        for result in results:  # offsets count the extracted text
            meta, name = result["metadata"], Path(result["metadata"]["source"]).name
            assert sources[name][meta["start"] : meta["end"]] == result["text"]
            assert not re.search(r"\b(Next|Previous|Up):", result["text"])
        results = _query(capsys, store, "Is libffi thread-safe?")
        assert Path(results[0]["metadata"]["source"]).name == "Thread-Safety.html"
        assert results[0]["text"].startswith("### 2.7 Thread Safety\n\nlibffi is not completely")
        results = _query(capsys, store, "What does FFI stand for?")
        assert Path(results[0]["metadata"]["source"]).name == "Introduction.html"
        assert results[0]["text"].startswith("## 1 What is libffi?\n\nCompilers for high level")

    def test_the_shown_section_path_has_no_permalink_marks(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        docs, store = tmp_path / "docs", tmp_path / "s"
        docs.mkdir()
        (docs / "os.html").write_bytes(NODE_OS)
        assert main(["index", str(docs), "--store", str(store), "--headers"]) == 0
        capsys.readouterr()
        argv = ["query", "end-of-line marker", "--store", str(store), "-k", "1"]
        assert main([*argv, "--json"]) == 0
        (result,) = json.loads(capsys.readouterr().out)["results"]
        best = max(result["metadata"]["matches"], key=lambda m: m["fused_score"])
        base = result["metadata"]["start"]
        found = result["text"][best["start"] - base : best["end"] - base].strip()
        assert found == "The operating system-specific end-of-line marker."
        assert result["heading"] == "OS | Node.js v22.11.0 Documentation > OS > os.EOL"
        assert main(argv) == 0  # not a terminal: plain text
        assert "§ OS | Node.js v22.11.0 Documentation > OS > os.EOL  [" in capsys.readouterr().out
