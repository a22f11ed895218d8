"""The HTML of the report pages: a table of a frame and a page with its provenance line."""

from __future__ import annotations

import html

import polars as pl


def html_table(frame: pl.DataFrame, limit: int = 60) -> str:
    """`frame` as an HTML table of its first `limit` rows (floats to 4 digits, text escaped)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    body = []
    for row in frame.head(limit).rows():
        cells = "".join(
            f"<td>{v:.4g}</td>" if isinstance(v, float) else f"<td>{html.escape(str(v))}</td>"
            for v in row
        )
        body.append(f"<tr>{cells}</tr>")
    more = (
        f"<p>({frame.height - limit} more rows in the Parquet table)</p>"
        if frame.height > limit
        else ""
    )
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{more}"


def page_html(title: str, provenance: dict, body: str) -> bytes:
    """One HTML page: a title, the provenance line, then `body`."""
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}img{{max-width:100%}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>config hash {html.escape(provenance["config_hash"])} &middot; crl {provenance["crl_version"]}
&middot; commit {html.escape(provenance["git_commit"])}</p>
{body}
</body></html>""".encode()
