"""What changes between two vLLM releases for the flags a service uses (from both catalogs).

Pure (catalog layer). The upgrade preview (`vllm-operator plan --vllm-version`) and the admission
webhook's warnings on a version change share it.
"""

from dataclasses import dataclass, field
from typing import Any

from vllm_operator.catalog.vllm.loader import load_version, supported_versions


@dataclass
class FlagChanges:
    """The release's flag changes that touch this service's argv, and the totals."""

    removed: list[str] = field(default_factory=list)
    renamed: list[str] = field(default_factory=list)
    deprecated: list[str] = field(default_factory=list)
    added_total: int = 0
    removed_total: int = 0


def argv_flags(argv: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in argv if a.startswith("--")]


def _spellings(flags: dict[str, Any]) -> dict[str, str]:
    """Every accepted spelling (aliases, --no-/--disable- negatives) -> its flag."""
    out: dict[str, str] = {}
    for name, spec in flags.items():
        out[name] = name
        for other in (*spec.aliases, *spec.negatives):
            out.setdefault(other, name)
    return out


def flag_changes(old: str, new: str, used: list[str]) -> FlagChanges:
    """Flags of `used` (argv flags in `old`'s spelling) that `new` removed, renamed (now only an
    alias or negative of another flag, or the same engine field under another name) or
    deprecated; and how many flags the release added and removed in all."""
    before, after = load_version(old).flags, load_version(new).flags
    old_names, new_names = _spellings(before), _spellings(after)
    by_dest = {spec.dest: name for name, spec in after.items()}
    out = FlagChanges(
        added_total=len(set(after) - set(before)), removed_total=len(set(before) - set(after))
    )
    for flag in dict.fromkeys(used):
        owner = old_names.get(flag)
        if owner is None:
            continue
        if flag in new_names:
            now = new_names[flag]
            if now != owner and now != flag:
                out.renamed.append(f"{flag} -> spelling of {now}")
            elif now in after and after[now].deprecated and not before[owner].deprecated:
                note = after[now].deprecation
                out.deprecated.append(flag + (f" ({note})" if note else ""))
            continue
        dest = before[owner].dest
        if dest in by_dest:
            out.renamed.append(f"{flag} -> {by_dest[dest]}")
        else:
            out.removed.append(flag + _history(flag, old, new))
    return out


def _history(flag: str, old: str, new: str) -> str:
    """When a removed flag was last accepted and first deprecated, between the two releases."""
    versions = list(supported_versions())  # oldest first
    lo, hi = sorted((versions.index(old), versions.index(new)))
    last = deprecated = None
    for version in versions[lo : hi + 1]:
        spec = load_version(version).flags.get(flag)
        if spec is None:
            continue
        last = version
        if spec.deprecated and deprecated is None:
            deprecated = version
    parts = [f"last accepted by {last}"] if last else []
    if deprecated:
        parts.append(f"deprecated since {deprecated}")
    return f" ({', '.join(parts)})" if parts else ""
