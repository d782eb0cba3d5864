"""The license a subset's README declares, as an SPDX id (or ``unknown`` and the README's own words).

Releases write their terms in many ways: a dataset card's YAML ``license:``, a ``License:`` line, a
``## License`` section, a name ("Creative Commons Attribution-ShareAlike 4.0") or a creativecommons.org
URL. The catalog records the id so ``--license-allow`` and a refresh's license history can compare them.
"""

from __future__ import annotations

import re

from ...schemas.safe_yaml import load_limited

# SPDX ids we recognise in a README, longest first so CC-BY-SA-4.0 is not read as CC-BY-4.0.
_SPDX = (
    "CC-BY-NC-SA-4.0",
    "CC-BY-NC-ND-4.0",
    "CC-BY-NC-4.0",
    "CC-BY-SA-4.0",
    "CC-BY-SA-3.0",
    "CC-BY-ND-4.0",
    "CC-BY-4.0",
    "CC-BY-3.0",
    "CC-BY-2.0",
    "CC0-1.0",
    "CDLA-Permissive-2.0",
    "CDLA-Permissive-1.0",
    "CDLA-Sharing-1.0",
    "ODC-By-1.0",
    "ODbL-1.0",
    "PDDL-1.0",
    "Apache-2.0",
    "MIT",
    "BSD-3-Clause",
    "BSD-2-Clause",
    "GPL-3.0",
    "GPL-2.0",
    "LGPL-3.0",
    "AGPL-3.0",
    "MPL-2.0",
    "Unlicense",
    "OpenRAIL",
)
_SPDX_RE = re.compile(
    r"(?<![A-Za-z0-9-])(" + "|".join(re.escape(s) for s in _SPDX) + r")(?![A-Za-z0-9.-]*\d)", re.IGNORECASE
)
# Names and URLs people write instead of the id (checked after the ids; first match in the text wins).
_LICENSE_WORDS: tuple[tuple[str, str], ...] = (
    (r"creativecommons\.org/licenses/by-nc-sa/4\.0", "CC-BY-NC-SA-4.0"),
    (r"creativecommons\.org/licenses/by-nc-nd/4\.0", "CC-BY-NC-ND-4.0"),
    (r"creativecommons\.org/licenses/by-nc/4\.0", "CC-BY-NC-4.0"),
    (r"creativecommons\.org/licenses/by-sa/4\.0", "CC-BY-SA-4.0"),
    (r"creativecommons\.org/licenses/by-sa/3\.0", "CC-BY-SA-3.0"),
    (r"creativecommons\.org/licenses/by-nd/4\.0", "CC-BY-ND-4.0"),
    (r"creativecommons\.org/licenses/by/4\.0", "CC-BY-4.0"),
    (r"creativecommons\.org/licenses/by/3\.0", "CC-BY-3.0"),
    (r"creativecommons\.org/licenses/by/2\.0", "CC-BY-2.0"),
    (r"creativecommons\.org/publicdomain/zero/1\.0", "CC0-1.0"),
    (r"attribution[- ]non-?commercial[- ]share-?alike 4\.0", "CC-BY-NC-SA-4.0"),
    (r"attribution[- ]non-?commercial[- ]no-?deriv\w* 4\.0", "CC-BY-NC-ND-4.0"),
    (r"attribution[- ]non-?commercial 4\.0", "CC-BY-NC-4.0"),
    (r"attribution[- ]share-?alike 4\.0", "CC-BY-SA-4.0"),
    (r"attribution[- ]share-?alike 3\.0", "CC-BY-SA-3.0"),
    (r"attribution[- ]no-?deriv\w* 4\.0", "CC-BY-ND-4.0"),
    (r"creative commons attribution 4\.0|\bCC[- ]BY 4\.0", "CC-BY-4.0"),
    (r"creative commons attribution 3\.0|\bCC[- ]BY 3\.0", "CC-BY-3.0"),
    (r"\bCC[- ]BY[- ]SA 4\.0", "CC-BY-SA-4.0"),
    (r"\bCC[- ]?0\b|creative commons zero|public domain dedication", "CC0-1.0"),
    (
        r"community data license agreement\W+permissive\W+version 2\.0|\bCDLA[- ]Permissive[- ]2",
        "CDLA-Permissive-2.0",
    ),
    (r"community data license agreement\W+permissive\W+version 1\.0", "CDLA-Permissive-1.0"),
    (r"open data commons attribution|\bODC[- ]BY\b", "ODC-By-1.0"),
    (r"open database license|\bODbL\b", "ODbL-1.0"),
    (r"apache license,? (?:version )?2\.0|\bapache[- ]2(?:\.0)?\b", "Apache-2.0"),
    (r"\bMIT license\b|\bthe MIT\b|\bMIT-licensed\b", "MIT"),
    (r"\bBSD[- ]3[- ]clause\b|\b3-clause BSD\b|new BSD license", "BSD-3-Clause"),
    (r"\bBSD[- ]2[- ]clause\b|\b2-clause BSD\b|simplified BSD license", "BSD-2-Clause"),
    (r"GNU Lesser General Public License,? v(?:ersion )?3|\bLGPL[- ]?v?3", "LGPL-3.0"),
    (r"GNU Affero General Public License,? v(?:ersion )?3|\bAGPL[- ]?v?3", "AGPL-3.0"),
    (r"GNU General Public License,? v(?:ersion )?3|\bGPL[- ]?v?3\b", "GPL-3.0"),
    (r"GNU General Public License,? v(?:ersion )?2|\bGPL[- ]?v?2\b", "GPL-2.0"),
    (r"mozilla public license,? (?:version )?2\.0", "MPL-2.0"),
)
_LICENSE_WORDS_RE = [(re.compile(p, re.IGNORECASE), spdx) for p, spdx in _LICENSE_WORDS]
_LICENSE_LINE = re.compile(r"^\W*(?:license|licence|licensing|terms)\b\W*(.*)$", re.IGNORECASE | re.MULTILINE)
_FRONT_MATTER = re.compile(r"\A\ufeff?---\s*\n(.*?)\n---\s*(?:\n|\Z)", re.DOTALL)


def _spdx_in(text: str) -> str | None:
    m = _SPDX_RE.search(text)
    if m:
        return next(s for s in _SPDX if s.lower() == m.group(1).lower())
    hits = [(m.start(), spdx) for rx, spdx in _LICENSE_WORDS_RE if (m := rx.search(text))]
    return min(hits)[1] if hits else None


def _front_matter_license(readme: str) -> tuple[str | None, str | None]:
    """``license:`` of a Hugging Face dataset card's YAML header: (spdx id, words) when present."""
    m = _FRONT_MATTER.match(readme)
    if not m:
        return None, None
    import yaml

    try:  # a release's README is untrusted: no aliases (a "billion laughs" under license:), node caps
        meta = load_limited(m.group(1), unique_keys=False)  # a card's other keys are not ours to judge
    except yaml.YAMLError:
        return None, None
    if not isinstance(meta, dict) or not meta.get("license"):
        return None, None
    value = meta["license"]
    values = [str(v) for v in value] if isinstance(value, list) else [str(value)]
    for v in values:
        spdx = _spdx_in(v)
        if spdx:
            return spdx, None
    named = meta.get("license_name") or meta.get("license_link")
    return None, str(named or ", ".join(values))


def _license_section(readme: str) -> list[str]:
    """The words of each ``License: ...`` line, or of the paragraph under a ``## License`` heading."""
    out: list[str] = []
    for m in _LICENSE_LINE.finditer(readme):
        words = m.group(1).strip()
        if not words:  # a heading: take the next non-empty paragraph
            rest = readme[m.end() :].lstrip("\n")
            para = re.split(r"\n\s*\n|\n#", rest, maxsplit=1)[0]
            words = " ".join(para.split())
        if words:
            out.append(words)
    return out


def detect_license(readme: str) -> tuple[str, str | None]:
    """SPDX id of the README's license, else ``unknown`` and the README's own words.

    Looked up in order: the dataset card's YAML ``license:``, the ``License:`` line or ``## License``
    section, then anywhere in the text (ids such as ``CC-BY-4.0``, names such as "Creative Commons
    Attribution-ShareAlike 4.0" or "Apache License, Version 2.0", and creativecommons.org URLs). A
    non-commercial term anywhere in the README narrows the license found (:func:`narrowed`).
    """
    spdx, words = _declared_license(readme)
    return (narrowed(spdx, readme), words) if spdx != "unknown" else (spdx, words)


def _declared_license(readme: str) -> tuple[str, str | None]:
    """The license the README declares first (card header, ``License:`` line or section, then the text)."""
    spdx, words = _front_matter_license(readme)
    if spdx:
        return spdx, None
    lines = _license_section(readme)
    for text in lines:
        spdx = _spdx_in(text)
        if spdx:
            return spdx, None
    body = _FRONT_MATTER.sub("", readme, count=1)
    spdx = _spdx_in(body) if not words else None
    if spdx:
        return spdx, None
    said = words or next(iter(lines), None)
    return "unknown", said[:500] if said else None


# A non-commercial term written anywhere ("images are now CC-BY-NC-4.0", "non-commercial use only"): the
# README's first License: line does not say all its terms.
_NON_COMMERCIAL = re.compile(r"\bnon[- ]?commercial\b|\bnot for commercial\b", re.IGNORECASE)
# The non-commercial variant of a license that has one (Creative Commons 4.0).
_NC_VARIANT = {
    "CC-BY-4.0": "CC-BY-NC-4.0",
    "CC-BY-SA-4.0": "CC-BY-NC-SA-4.0",
    "CC-BY-ND-4.0": "CC-BY-NC-ND-4.0",
}
NON_COMMERCIAL_REF = "LicenseRef-NonCommercial"


def _all_ids(text: str) -> list[str]:
    ids = [next(s for s in _SPDX if s.lower() == m.group(1).lower()) for m in _SPDX_RE.finditer(text)]
    return ids + [spdx for rx, spdx in _LICENSE_WORDS_RE if rx.search(text)]


def narrowed(spdx: str, readme: str) -> str:
    """``spdx`` as the whole README restricts it: a non-commercial license named anywhere replaces a
    license without that term (the most restrictive one named, e.g. CC-BY-NC-SA-4.0 before CC-BY-NC-4.0);
    a "non-commercial" phrase turns a Creative Commons license into its NC variant, any other into
    ``LicenseRef-NonCommercial``. So ``--license-allow CC-BY-4.0`` no longer takes a subset whose README
    added such a term below its first ``License:`` line."""
    if "-NC" in spdx or spdx == NON_COMMERCIAL_REF:
        return spdx
    named = [i for i in _all_ids(readme) if "-NC" in i]
    if named:
        return max(named, key=lambda i: (len(i), i))  # NC-SA / NC-ND before plain NC
    if _NON_COMMERCIAL.search(readme):
        return _NC_VARIANT.get(spdx, NON_COMMERCIAL_REF)
    return spdx
