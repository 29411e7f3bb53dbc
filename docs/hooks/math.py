"""MkDocs hook: the LaTeX of pages and docstrings as MathML, written at build time.

``pymdownx.arithmatex`` (generic mode) marks ``$...$`` and ``$$...$$`` in pages and in the
docstrings mkdocstrings renders; this hook turns each mark into MathML with latex2mathml, which
browsers draw natively. The site therefore needs no JavaScript typesetter and no network, and a
sampler's update rule reads on its API page as it does in its paper.
"""

from __future__ import annotations

import html
import re

from latex2mathml.converter import convert

# arithmatex's generic output: \( \) inline in a span, \[ \] displayed in a div
_INLINE = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.S)
_DISPLAY = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.S)


def _mathml(tex: str, display: str) -> str:
    # latex2mathml reads amsmath's aligned as running text ("&" drawn, rows joined); split, the
    # same alignment at & with rows broken at \\, it draws as a table
    tex = html.unescape(tex).strip().replace("{aligned}", "{split}")
    return convert(tex, display=display)


def on_page_content(content: str, **_) -> str:
    content = _DISPLAY.sub(lambda m: f'<div class="math">{_mathml(m[1], "block")}</div>', content)
    return _INLINE.sub(lambda m: _mathml(m[1], "inline"), content)
