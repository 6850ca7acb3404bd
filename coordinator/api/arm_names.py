"""Arm names that read as what they are: one name, one look.

A dashboard, a log or an operator's terminal shows arms by name; two arms that look the same, or a
name that hides characters, let whoever creates an experiment mislead whoever reads its answer.
The rules follow Unicode's security mechanisms (UTS #39) through ICU's spoof checker
(`pyicu-wheels`, which bundles ICU), not a list of our own:

- a name is NFKC-normalized, trimmed, its runs of spaces made one (HTML draws "A  B" as "A B":
  the dashboard would show two names as one), printable, at most MAX_ARM_NAME characters;
- no default-ignorable code point (fillers, joiners, variation selectors: they draw nothing) and
  no blank glyph standing in for a space (U+2800);
- no more than MAX_MARKS nonspacing marks in a row, and never the same one twice in a row
  (UTS #39 section 5.4): no stacked marks that overflow a line or hide a letter;
- scripts mixed at most as UTS #39's "moderately restrictive" level allows (Latin with Han,
  Hangul or Japanese, for instance, but never Latin with Cyrillic or Greek), and one digit system;
- two arms of an experiment never have the same confusable skeleton (UTS #39 section 4), nor the
  same case-folded form: Latin "A", Cyrillic "А" and Greek "Α" are one name.
"""

import re
import unicodedata

import icu

MAX_ARM_NAME = 64
MAX_MARKS = 4  # UTS #39 section 5.4: "more than 4 nonspacing marks" in a row is suspicious
BLANK_GLYPHS = frozenset({"\u2800"})  # BRAILLE PATTERN BLANK: a symbol that draws as a space

_CHECKS = icu.USpoofChecks.RESTRICTION_LEVEL | icu.USpoofChecks.MIXED_NUMBERS
_DEFAULT_IGNORABLE = icu.UProperty.DEFAULT_IGNORABLE_CODE_POINT
# After NFKC (U+00A0, U+2003, U+3000, ... become U+0020) the only printable blank is the space:
# any other (a tab, a newline) is refused as unprintable.
_SPACES = re.compile(r" {2,}")


def _spoof_checker() -> icu.SpoofChecker:
    checker = icu.SpoofChecker()
    checker.setChecks(_CHECKS)
    checker.setRestrictionLevel(icu.URestrictionLevel.MODERATELY_RESTRICTIVE)
    return checker


_CHECKER = _spoof_checker()


def describe(char: str) -> str:
    """U+0410 (CYRILLIC CAPITAL LETTER A): how an error names a character a reader may not see."""
    return f"U+{ord(char):04X} ({unicodedata.name(char, 'unnamed')})"


def arm_name(name: str) -> str:
    """An arm's name as stored, or ValueError saying which rule (module docstring) it breaks."""
    normal = _SPACES.sub(" ", unicodedata.normalize("NFKC", name).strip())
    if not normal:
        raise ValueError("an arm name must not be empty or blank")
    if len(normal) > MAX_ARM_NAME:
        raise ValueError(f"an arm name has at most {MAX_ARM_NAME} characters")
    for char in normal:
        if not char.isprintable():
            raise ValueError(f"an arm name must be printable: {describe(char)} is not")
        if icu.Char.hasBinaryProperty(char, _DEFAULT_IGNORABLE) or char in BLANK_GLYPHS:
            raise ValueError(
                f"an arm name must not hide characters: {describe(char)} draws nothing"
            )
    _marks(normal)
    failed = _CHECKER.check(normal)
    if failed & icu.USpoofChecks.RESTRICTION_LEVEL:
        raise ValueError(
            f"an arm name must not mix look-alike scripts: {normal!r} mixes "
            f"{' and '.join(_scripts(normal))}"
        )
    if failed & icu.USpoofChecks.MIXED_NUMBERS:
        raise ValueError(f"an arm name must use one set of digits: {normal!r} mixes several")
    return normal


def _marks(name: str) -> None:
    """Refuse long runs of nonspacing marks and a mark repeated, looked for in the decomposed form
    as UTS #39 says (a precomposed "é" is a letter and a mark)."""
    run: list[str] = []
    for char in unicodedata.normalize("NFD", name):
        if unicodedata.category(char) not in ("Mn", "Me"):
            run = []
            continue
        if run and run[-1] == char:
            raise ValueError(f"an arm name must not repeat a mark: {describe(char)} twice in a row")
        run.append(char)
        if len(run) > MAX_MARKS:
            raise ValueError(
                f"an arm name has at most {MAX_MARKS} nonspacing marks in a row, not {len(run)}"
                " or more"
            )


def _scripts(name: str) -> list[str]:
    """The scripts of a name's letters, in order of appearance (Common and Inherited left out)."""
    seen: list[str] = []
    for char in name:
        script = icu.Script.getScript(char).getName()
        if script not in ("Common", "Inherited") and script not in seen:
            seen.append(script)
    return seen


def skeleton(name: str) -> str:
    """UTS #39's skeleton: equal for two strings a reader would confuse ("A", "А", "Α"; "l", "1")."""
    return str(_CHECKER.getSkeleton(0, name))


def distinct_arms(names: list[str]) -> list[str]:
    """Names no reader can confuse: neither equal ignoring case ("A" and "a") nor with one
    confusable skeleton, in either case ("A" and Cyrillic "А"; "I" and "l")."""
    seen: dict[str, str] = {}
    for name in names:
        folded = name.casefold()
        for key in dict.fromkeys((folded, skeleton(name), skeleton(folded))):
            if key in seen:
                raise ValueError(
                    f"arm names must be distinct: {seen[key]!r} and {name!r} look the same"
                    f" ({', '.join(_differences(seen[key], name))})"
                )
        for key in (folded, skeleton(name), skeleton(folded)):
            seen[key] = name
    return names


def _differences(first: str, second: str) -> list[str]:
    """The characters where two look-alike names differ, named: what makes them two names."""
    if first == second:
        return ["one name once normalized"]
    differ = [describe(c) for c in dict.fromkeys(first + second) if (c in first) != (c in second)]
    return differ if first.casefold() != second.casefold() else ["they differ only in case"]
