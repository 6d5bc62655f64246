"""The README's example, generated: between ``<!-- answer: <study> -->`` and ``<!-- /answer
-->`` the README beside a reports folder holds that study's Answer (its table and sentences)
as its ``report.md`` has it, its links pointing into the report's folder. ``ablate report``
fills it whenever it builds that study into that folder, so the example is never typed.
"""

from __future__ import annotations

import re
from pathlib import Path

from ablate.report.render import PROVENANCE

START, END = "<!-- answer: {study} -->", "<!-- /answer -->"


def answer_section(report_md: str) -> str:
    """The Answer of a ``report.md``: its lines from after ``## Answer`` to the next heading."""
    after = report_md.split("\n## Answer\n", 1)
    if len(after) < 2:
        return ""
    return re.split(r"\n#{1,2} ", after[1], maxsplit=1)[0].strip()


def readme_answer(report_md: str, folder: str) -> str:
    """The Answer with its provenance links relative to the README (``folder``: the report's
    folder from the README's, e.g. ``reports/norm_placement``)."""
    return answer_section(report_md).replace(f"]({PROVENANCE}", f"]({folder}/{PROVENANCE}")


def fill_readme(readme: Path, study: str, report_md: Path) -> bool:
    """Replace the study's marked example in ``readme`` by its report's Answer; whether the
    README has the markers (it is left as it is otherwise)."""
    if not readme.is_file() or not report_md.is_file():
        return False
    text = readme.read_text()
    start = START.format(study=study)
    pattern = re.compile(re.escape(start) + r"\n.*?\n" + re.escape(END), re.S)
    if not pattern.search(text):
        return False
    try:
        folder = report_md.parent.resolve().relative_to(readme.parent.resolve()).as_posix()
    except ValueError:  # a report outside the README's tree: its links would not resolve
        return False
    body = readme_answer(report_md.read_text(), folder)
    new = pattern.sub(lambda _: f"{start}\n{body}\n{END}", text, count=1)
    if new != text:
        readme.write_text(new)
    return True
