"""The function name of an Itanium-mangled C++ symbol (``_Z...``), without demangling it all.

Kernel names usually arrive demangled (CUPTI's records through ``__cxa_demangle``, Nsight
Compute's ``demangled`` base), but not always: a source without a demangler, or a symbol the
demangler refused, keeps ``_Z6kernelPfi``. Nsight Compute's ``--kernel-name-base function``
matches the function's own name (``kernel``), so ``stepscope kernels`` needs that name. This
reads just enough of the Itanium C++ ABI mangling (public specification: nested names
``N...E``, source names ``<length><identifier>``, template arguments ``I...E``, literals
``L...E``, substitutions ``S..._``, template parameters ``T..._``, CV-qualifiers) to find the
last component of the function's name. Anything it does not follow returns None.
"""

from __future__ import annotations

_QUALIFIERS = frozenset("rVKRO")
_STD_ABBREVIATIONS = frozenset("tabsiod")


def _source_name(s: str, i: int) -> tuple[str, int] | None:
    j = i
    while j < len(s) and s[j].isdigit():
        j += 1
    n = int(s[i:j])
    if n <= 0 or j + n > len(s):
        return None
    return s[j:j + n], j + n


def _skip_reference(s: str, i: int) -> int | None:
    """``s[i]`` is ``S`` (a substitution: ``St``/``Sa``... or ``S<seq>_``) or ``T`` (a template
    parameter, ``T<n>_``): the index after it."""
    if s[i] == "S" and i + 1 < len(s) and s[i + 1] in _STD_ABBREVIATIONS:
        return i + 2
    end = s.find("_", i + 1)
    return end + 1 if end >= 0 else None


def _skip_template_args(s: str, i: int) -> int | None:
    """``s[i] == 'I'``: the index after its matching ``E``."""
    depth, i = 0, i
    while i < len(s):
        c = s[i]
        if c.isdigit():
            got = _source_name(s, i)
            if got is None:
                return None
            i = got[1]
            continue
        if c == "L":  # a literal: L <type> <value> E, or L_Z <encoding> E (not followed)
            if s.startswith("L_Z", i):
                return None
            end = s.find("E", i)
            if end < 0:
                return None
            i = end + 1
            continue
        if c in "ST":  # S_, S<seq>_, St...; T_, T<n>_
            nxt = _skip_reference(s, i)
            if nxt is None:
                return None
            i = nxt
            continue
        if c in "INX":
            depth += 1
        elif c == "E":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def mangled_function(name: str) -> str | None:
    """``_ZN2ns6kernelIiEEvPT_`` -> ``kernel``; None when ``name`` is not a mangled function
    name this can read."""
    s = name.strip()
    if not s.startswith("_Z") or len(s) < 3:
        return None
    if s[2].isdigit():  # an unscoped name
        got = _source_name(s, 2)
        return got[0] if got else None
    if s[2] != "N":
        return None
    i, last = 3, None
    while i < len(s):
        c = s[i]
        if c.isdigit():
            got = _source_name(s, i)
            if got is None:
                return None
            last, i = got
        elif c in _QUALIFIERS and last is None:
            i += 1
        elif c == "S":  # a substitution as the scope (St = std::, S_, S0_ ...)
            nxt = _skip_reference(s, i)
            if nxt is None:
                return None
            i = nxt
        elif c == "I":
            nxt = _skip_template_args(s, i)
            if nxt is None:
                return None
            i = nxt
        elif c == "E":
            return last
        else:  # constructors, operators, lambdas ...: not followed
            return None
    return None
