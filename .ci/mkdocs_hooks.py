"""MkDocs hook (mkdocs.yml ``hooks``): the engine's docstrings use Sphinx's cross-reference roles
(``:class:`~blr_derive.families.model.Family```, ``:func:`recipe```), which the API reference (mkdocstrings,
docs/api.md) renders as the role's name followed by a code span; this prints them as the code span alone, with the
last dotted component for a ``~`` target, as Sphinx does."""
import re

_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj):<code>(~?)([^<]*)</code>")


def on_page_content(html, **kwargs):
    return _ROLE.sub(lambda m: "<code>%s</code>" % (m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2)),
                     html)
