from mlperf_mig._text import printable


def test_plain_text_is_unchanged():
    assert printable("NVIDIA H100 80GB HBM3 — 1g.10gb") == "NVIDIA H100 80GB HBM3 — 1g.10gb"


def test_escape_bell_and_newline_are_shown_escaped():
    crafted = "H100\x1b]0;owned\x07\x1b[2J\nnext\rline\t\x9b"
    shown = printable(crafted)
    assert shown == "H100\\x1b]0;owned\\x07\\x1b[2J\\x0anext\\x0dline\\x09\\x9b"
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in shown)


def test_bidi_override_is_shown_escaped():
    assert printable("gpu\u202eevil") == "gpu\\u202eevil"


def test_non_text_is_printed_as_its_str():
    assert printable(3) == "3"
