"""An HTML page's bytes as text, decoded as a browser decodes a page it has no HTTP header for.

:func:`decode` follows the HTML standard's encoding sniffing with the WHATWG
Encoding standard's labels (https://encoding.spec.whatwg.org):

1. A byte-order mark (UTF-8, UTF-16LE, UTF-16BE) decides.
2. Else the encoding the page declares wins: the first ``<meta charset>`` or
   ``<meta http-equiv="content-type" content="...; charset=...">`` found by the
   standard's prescan of the first 1024 bytes (comments and other tags'
   attribute values skipped), else an XML declaration at the very start
   (``<?xml ... encoding="..."?>``: the prescan's "get an XML encoding"; one
   in UTF-16 without a BOM means UTF-16). Bytes the encoding can not decode
   become U+FFFD, as in a browser: one stray byte costs one character, not the
   page.
3. Else (nothing declared) UTF-8 when the whole page is UTF-8 (as browsers'
   detectors find it), else windows-1252, their fallback in most locales.

Labels are the standard's: ``latin1``, ``iso-8859-1`` and ``ascii`` name
windows-1252, ``utf8`` names UTF-8, ``gb2312`` names GBK; a declared UTF-16
means UTF-8 (a page whose declaration reads as ASCII is not UTF-16) and
``x-user-defined`` windows-1252; a label the standard does not know (``utf-7``,
``base64``) is no declaration. The standard's "replacement" labels
(``iso-2022-kr``, ``hz-gb-2312``...), which a browser shows as one U+FFFD, are
refused with a :class:`ValueError` naming the label.

Single-byte encodings are decoded exactly as the standard's indexes have them
(checked against them byte by byte): Python's table of the encoding, where the
bytes 0x80-0x9F it leaves undefined are the C1 controls of those numbers
(windows-1252's 0x81 is U+0081, as in a browser), and three other bytes. The
multi-byte ones (GBK, Big5, Shift_JIS...) use Python's codec of the closest
table (gb18030, big5hkscs, cp932, cp949...), as a browser's but for a few corners.
"""

from __future__ import annotations

import codecs
import functools

_SINGLE_BYTE: dict[str, tuple[str, str]] = {
    # the standard's name: (Python's codec of the same table, the standard's labels)
    "ibm866": ("cp866", "866 cp866 csibm866 ibm866"),
    "iso-8859-2": (
        "iso8859-2",
        "csisolatin2 iso-8859-2 iso-ir-101 iso8859-2 iso88592 iso_8859-2 iso_8859-2:1987 l2 latin2",
    ),
    "iso-8859-3": (
        "iso8859-3",
        "csisolatin3 iso-8859-3 iso-ir-109 iso8859-3 iso88593 iso_8859-3 iso_8859-3:1988 l3 latin3",
    ),
    "iso-8859-4": (
        "iso8859-4",
        "csisolatin4 iso-8859-4 iso-ir-110 iso8859-4 iso88594 iso_8859-4 iso_8859-4:1988 l4 latin4",
    ),
    "iso-8859-5": (
        "iso8859-5",
        "csisolatincyrillic cyrillic iso-8859-5 iso-ir-144 iso8859-5 iso88595 iso_8859-5 "
        "iso_8859-5:1988",
    ),
    "iso-8859-6": (
        "iso8859-6",
        "arabic asmo-708 csiso88596e csiso88596i csisolatinarabic ecma-114 iso-8859-6 "
        "iso-8859-6-e iso-8859-6-i iso-ir-127 iso8859-6 iso88596 iso_8859-6 iso_8859-6:1987",
    ),
    "iso-8859-7": (
        "iso8859-7",
        "csisolatingreek ecma-118 elot_928 greek greek8 iso-8859-7 iso-ir-126 iso8859-7 "
        "iso88597 iso_8859-7 iso_8859-7:1987 sun_eu_greek",
    ),
    "iso-8859-8": (
        "iso8859-8",
        "csiso88598e csisolatinhebrew hebrew iso-8859-8 iso-8859-8-e iso-ir-138 iso8859-8 "
        "iso88598 iso_8859-8 iso_8859-8:1988 visual",
    ),
    "iso-8859-8-i": ("iso8859-8", "csiso88598i iso-8859-8-i logical"),
    "iso-8859-10": (
        "iso8859-10",
        "csisolatin6 iso-8859-10 iso-ir-157 iso8859-10 iso885910 l6 latin6",
    ),
    "iso-8859-13": ("iso8859-13", "iso-8859-13 iso8859-13 iso885913"),
    "iso-8859-14": ("iso8859-14", "iso-8859-14 iso8859-14 iso885914"),
    "iso-8859-15": (
        "iso8859-15",
        "csisolatin9 iso-8859-15 iso8859-15 iso885915 iso_8859-15 l9",
    ),
    "iso-8859-16": ("iso8859-16", "iso-8859-16"),
    "koi8-r": ("koi8-r", "cskoi8r koi koi8 koi8-r koi8_r"),
    "koi8-u": ("koi8-u", "koi8-ru koi8-u"),
    "macintosh": ("mac-roman", "csmacintosh mac macintosh x-mac-roman"),
    "windows-874": (
        "cp874",
        "dos-874 iso-8859-11 iso8859-11 iso885911 tis-620 windows-874",
    ),
    "windows-1250": ("cp1250", "cp1250 windows-1250 x-cp1250"),
    "windows-1251": ("cp1251", "cp1251 windows-1251 x-cp1251"),
    "windows-1252": (
        "cp1252",
        "ansi_x3.4-1968 ascii cp1252 cp819 csisolatin1 ibm819 iso-8859-1 iso-ir-100 iso8859-1 "
        "iso88591 iso_8859-1 iso_8859-1:1987 l1 latin1 us-ascii windows-1252 x-cp1252",
    ),
    "windows-1253": ("cp1253", "cp1253 windows-1253 x-cp1253"),
    "windows-1254": (
        "cp1254",
        "cp1254 csisolatin5 iso-8859-9 iso-ir-148 iso8859-9 iso88599 iso_8859-9 "
        "iso_8859-9:1989 l5 latin5 windows-1254 x-cp1254",
    ),
    "windows-1255": ("cp1255", "cp1255 windows-1255 x-cp1255"),
    "windows-1256": ("cp1256", "cp1256 windows-1256 x-cp1256"),
    "windows-1257": ("cp1257", "cp1257 windows-1257 x-cp1257"),
    "windows-1258": ("cp1258", "cp1258 windows-1258 x-cp1258"),
    "x-mac-cyrillic": ("mac-cyrillic", "x-mac-cyrillic x-mac-ukrainian"),
}
_SINGLE_BYTE_FIXES = {"koi8-u": {0xAE: "\u045e", 0xBE: "\u040e"}, "windows-1255": {0xCA: "\u05ba"}}
"""Where the standard's index and Python's table differ but for the C1 holes (KOI8-U: KOI8-RU's)."""
_ENCODINGS: dict[str, tuple[str | None, str]] = {
    # the standard's name: (Python's codec (None: the replacement encoding), its labels)
    "utf-8": ("utf-8", "unicode-1-1-utf-8 unicode11utf8 unicode20utf8 utf-8 utf8 x-unicode20utf8"),
    **_SINGLE_BYTE,
    "gbk": (  # the standard's GBK decoder is its gb18030 decoder
        "gb18030",
        "chinese csgb2312 csiso58gb231280 gb2312 gb_2312 gb_2312-80 gbk iso-ir-58 x-gbk",
    ),
    "gb18030": ("gb18030", "gb18030"),
    "big5": ("big5hkscs", "big5 big5-hkscs cn-big5 csbig5 x-x-big5"),
    "euc-jp": ("euc-jp", "cseucpkdfmtjapanese euc-jp x-euc-jp"),
    "iso-2022-jp": ("iso2022-jp", "csiso2022jp iso-2022-jp"),
    "shift_jis": (
        "cp932",
        "csshiftjis ms932 ms_kanji shift-jis shift_jis sjis windows-31j x-sjis",
    ),
    "euc-kr": (
        "cp949",
        "cseuckr csksc56011987 euc-kr iso-ir-149 korean ks_c_5601-1987 ks_c_5601-1989 ksc5601 "
        "ksc_5601 windows-949",
    ),
    "replacement": (
        None,
        "csiso2022kr hz-gb-2312 iso-2022-cn iso-2022-cn-ext iso-2022-kr replacement",
    ),
    "utf-16be": ("utf-16-be", "unicodefffe utf-16be"),
    "utf-16le": (
        "utf-16-le",
        "csunicode iso-10646-ucs-2 ucs-2 unicode unicodefeff utf-16 utf-16le",
    ),
    "x-user-defined": (None, "x-user-defined"),  # decoded by its table
}
_LABELS = {label: name for name, (_, labels) in _ENCODINGS.items() for label in labels.split()}
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_PRESCAN = 1024
_UTF_16 = ("utf-16be", "utf-16le")
_SPACE = b"\t\n\f\r "
_SPACE_SLASH = _SPACE + b"/"
_SPACE_END = _SPACE + b">"
_ASCII_SPACE = "\t\n\f\r "


def decode(data: bytes) -> str:
    """A page's bytes as text, the encoding chosen as a browser chooses it (see the module).

    Raises:
        ValueError: the page declares an encoding a browser refuses to decode
            (the standard's replacement encoding, such as ``iso-2022-kr``).
    """
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data[len(bom) :].decode(codec, "replace")
    head = data[:_PRESCAN]
    if head.startswith(b"<\0?\0x\0"):  # an XML declaration in UTF-16, without a BOM
        return data.decode("utf-16-le", "replace")
    if head.startswith(b"\0<\0?\0x"):
        return data.decode("utf-16-be", "replace")
    label = _prescan(head)
    if label is not None:
        return _decoded(data, _declared(label), label)
    label = _xml_declaration(head)
    if label is not None:
        name = _named(label)
        return _decoded(data, "utf-8" if name in _UTF_16 else name, label)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return _decoded(data, "windows-1252")


def encoding(label: str) -> str | None:
    """The standard's name of the encoding ``label`` names (``"latin1"``: windows-1252), or None."""
    return _LABELS.get(label.strip(_ASCII_SPACE).lower())


def _named(label: str) -> str:
    """The encoding a label the prescan found names (it names one)."""
    return _LABELS[label.strip(_ASCII_SPACE).lower()]


def _decoded(data: bytes, name: str, label: str = "") -> str:
    if name in _SINGLE_BYTE or name == "x-user-defined":
        return codecs.charmap_decode(data, "strict", _table(name))[0]
    codec = _ENCODINGS[name][0]
    if codec is None:
        msg = (
            f"it declares charset {label.strip(_ASCII_SPACE)!r}, which browsers refuse to "
            f"decode (WHATWG's replacement encoding); any other charset is read"
        )
        raise ValueError(msg)
    return data.decode(codec, "replace")


@functools.cache
def _table(name: str) -> str:
    """A single-byte encoding's 256 characters as the standard's index has them.

    Python's table of it, with the bytes 0x80-0x9F it leaves undefined as the C1
    controls of those numbers (windows-1252's 0x81 is U+0081) and the standard's
    few other differences; x-user-defined's high bytes are U+F780-U+F7FF.
    """
    if name == "x-user-defined":
        return "".join(chr(b if b < 0x80 else 0xF700 + b) for b in range(256))
    table = bytes(range(256)).decode(_SINGLE_BYTE[name][0], "replace")
    chars = [chr(b) if c == "\ufffd" and 0x80 <= b <= 0x9F else c for b, c in enumerate(table)]
    for byte, char in _SINGLE_BYTE_FIXES.get(name, {}).items():
        chars[byte] = char
    return "".join(chars)


def _declared(label: str) -> str:
    """The encoding a ``<meta>`` naming ``label`` means: UTF-16 is UTF-8, x-user-defined 1252."""
    name = _named(label)
    if name in _UTF_16:
        return "utf-8"
    return "windows-1252" if name == "x-user-defined" else name


def _xml_declaration(head: bytes) -> str | None:
    """The label of an XML declaration that opens the page, if it names an encoding.

    The HTML standard's "get an XML encoding".
    """
    if not head.startswith(b"<?xml"):
        return None
    end = head.find(b">")
    at = head.find(b"encoding", 0, end) if end >= 0 else -1
    if at < 0:
        return None
    at += len(b"encoding")
    while at < end and head[at] <= 0x20:
        at += 1
    if head[at : at + 1] != b"=":
        return None
    at += 1
    while at < end and head[at] <= 0x20:
        at += 1
    quote = head[at : at + 1]
    close = head.find(quote, at + 1, end) if quote in (b'"', b"'") else -1
    label = head[at + 1 : close]
    if close < 0 or any(byte <= 0x20 for byte in label):
        return None
    text = label.decode("latin-1")
    return text if encoding(text) is not None else None


def _prescan(head: bytes) -> str | None:
    """The label of the first ``<meta>`` in ``head`` naming an encoding: the standard's prescan."""
    at, end = 0, len(head)
    while at < end:
        if head.startswith(b"<!--", at):
            close = head.find(b"-->", at + 2)
            if close < 0:
                return None
            at = close + 3
            continue
        if head[at : at + 5].lower() == b"<meta" and at + 5 < end and head[at + 5] in _SPACE_SLASH:
            found, at = _meta(head, at + 5)
            if found is not None:
                return found
        elif head.startswith(b"<", at) and _tag_start(head, at + 1):
            at += 1
            while at < end and head[at] not in _SPACE_END:
                at += 1
            while True:  # its attributes, so that a ">" in a quoted value does not end it
                attribute, at = _attribute(head, at)
                if attribute is None:
                    break
        elif head.startswith((b"<!", b"</", b"<?"), at):
            close = head.find(b">", at)
            if close < 0:
                return None
            at = close
        at += 1
    return None


def _tag_start(head: bytes, at: int) -> bool:
    """A letter, or ``/`` and a letter, at ``at``: a start or end tag's name."""
    if head[at : at + 1] == b"/":
        at += 1
    return head[at : at + 1].isalpha()


def _meta(head: bytes, at: int) -> tuple[str | None, int]:
    """The label a ``<meta>`` whose attributes start at ``at`` declares, and where it ends."""
    seen: set[str] = set()
    pragma = False
    need_pragma: bool | None = None
    charset: str | None = None
    failed = False  # a charset attribute that names no encoding
    while True:
        attribute, at = _attribute(head, at)
        if attribute is None:
            break
        name, value = attribute
        if name in seen:
            continue
        seen.add(name)
        if name == "http-equiv" and value == "content-type":
            pragma = True
        elif name == "content" and charset is None and not failed:
            label = _content_charset(value)
            if label is not None and encoding(label) is not None:
                charset, need_pragma = label, True
        elif name == "charset":
            charset, need_pragma = value, False
            failed = encoding(value) is None
    if at >= len(head):  # the bytes ran out inside the tag: the prescan gives up
        return None, at
    if need_pragma is None or (need_pragma and not pragma) or charset is None or failed:
        return None, at
    return charset, at


def _attribute(head: bytes, at: int) -> tuple[tuple[str, str] | None, int]:
    """The attribute at ``at`` (name and value, lowercased) and where it ends: "get an attribute".

    ``None`` when the tag ends there, or when ``head`` ends first.
    """
    end = len(head)
    while at < end and head[at] in _SPACE_SLASH:
        at += 1
    if at >= end or head[at] == ord(">"):
        return None, at
    name = bytearray()
    while True:  # the name
        byte = head[at]
        if byte == ord("=") and name:
            break
        if byte in _SPACE:
            while at < end and head[at] in _SPACE:
                at += 1
            if at >= end:
                return None, at
            if head[at] != ord("="):
                return (_text(name), ""), at
            break
        if byte in b"/>":
            return (_text(name), ""), at
        name.append(byte)
        at += 1
        if at >= end:
            return None, at
    at += 1  # past "="
    while at < end and head[at] in _SPACE:
        at += 1
    if at >= end:
        return None, at
    quote = head[at]
    if quote in b"\"'":
        close = head.find(bytes([quote]), at + 1)
        if close < 0:
            return None, end
        return (_text(name), _text(head[at + 1 : close])), close + 1
    if quote == ord(">"):
        return (_text(name), ""), at
    start = at
    while at < end and head[at] not in _SPACE_END:
        at += 1
    if at >= end:
        return None, at
    return (_text(name), _text(head[start:at])), at


def _text(raw: bytes | bytearray) -> str:
    """Bytes of a tag as the prescan reads them: one character a byte, ASCII lowercased."""
    return bytes(raw).lower().decode("latin-1")


def _content_charset(content: str) -> str | None:
    """The label after ``charset=`` in a meta's ``content``: the standard's extraction algorithm."""
    at = 0
    while True:
        found = content.find("charset", at)
        if found < 0:
            return None
        at = found + len("charset")
        while at < len(content) and content[at] in _ASCII_SPACE:
            at += 1
        if content[at : at + 1] != "=":
            continue
        at += 1
        while at < len(content) and content[at] in _ASCII_SPACE:
            at += 1
        if at >= len(content):
            return None
        quote = content[at]
        if quote in "\"'":
            close = content.find(quote, at + 1)
            return None if close < 0 else content[at + 1 : close]
        stop = at
        while stop < len(content) and content[stop] not in _ASCII_SPACE + ";":
            stop += 1
        return content[at:stop]
