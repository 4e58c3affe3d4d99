"""The dashboard's link as a notebook shows it: the ``_repr_html_`` of Client and Cluster."""

from __future__ import annotations

import html


def dashboard_html(title: str, lines: list[str], link: str) -> str:
    """A small card: ``title``, a few facts, and the dashboard's link (token included; the
    notebook is its owner's, as the connection file is)."""
    facts = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    if link:
        a = html.escape(link, quote=True)
        where = (
            f'<a href="{a}" target="_blank" rel="noopener">{html.escape(link.split("?")[0])}</a>'
        )
    else:
        where = "none (the controller runs with --no-dashboard)"
    return (
        '<div style="border:1px solid #ccc;border-radius:6px;padding:8px 12px;'
        'font-family:sans-serif;max-width:40em">'
        f"<strong>{html.escape(title)}</strong><ul style='margin:4px 0'>{facts}"
        f"<li>Dashboard: {where}</li></ul></div>"
    )
