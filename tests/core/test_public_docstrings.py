"""Every public name of infinigram_hf, and every public method and property of its classes, has a
docstring (issue 13: `help()` and IDEs show them)."""
import inspect

import infinigram_hf


def test_public_members_have_docstrings() -> None:
    missing = []
    for name in infinigram_hf.__all__:
        if name.startswith("__"):
            continue
        obj = getattr(infinigram_hf, name)
        if not inspect.getdoc(obj):
            missing.append(name)
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if member.startswith("_"):
                    continue
                f = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
                if (callable(f) or isinstance(value, property)) and not (getattr(f, "__doc__", "") or "").strip():
                    missing.append(f"{name}.{member}")
    assert missing == []
