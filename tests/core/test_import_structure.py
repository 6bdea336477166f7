"""The import structure the layer contracts do not see: what `import infinigram_hf` loads.

The core works with numpy and cffi alone: torch, transformers, datasets and tqdm are imported
only when a name that needs them is used (README, "Architecture"; pyproject.toml's
[tool.importlinter] checks which layer may import what)."""
import subprocess
import sys

HEAVY = ("torch", "transformers", "datasets", "tqdm", "evaluate", "matplotlib")


def _loaded_after(code: str) -> list:
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return [m for m in out.strip().split(",") if m]


def test_import_loads_no_heavy_dependency() -> None:
    assert _loaded_after("import infinigram_hf") == []


def test_lower_layers_load_no_heavy_dependency() -> None:
    code = ("import infinigram_hf.index, infinigram_hf.lm, infinigram_hf.build, infinigram_hf.lm.mixture, "
            "infinigram_hf.lm.context")
    assert _loaded_after(code) == []


def test_metric_constants_do_not_load_torch() -> None:
    # the evaluate metric's defaults live in lm/mixture.py (once they came through processor.py)
    assert "torch" not in _loaded_after("from infinigram_hf.lm.mixture import DEFAULT_LAMBDA_DENSE")
    assert "torch" not in _loaded_after("import infinigram_hf.hf.perplexity")


def test_lazy_public_names_resolve() -> None:
    import infinigram_hf

    for name in infinigram_hf.__all__:
        assert getattr(infinigram_hf, name) is not None, name
    assert set(infinigram_hf.__all__) <= set(dir(infinigram_hf))
    assert callable(infinigram_hf.perplexity)  # the function, not the module (hf/perplexity.py)


def test_documented_paths_kept() -> None:
    from infinigram_hf import candidate, smoothing, speculative
    from infinigram_hf.hf import assisted
    from infinigram_hf.hf import speculative as loop
    from infinigram_hf.lm import smoothing as lm_smoothing
    from infinigram_hf.metrics import PERPLEXITY_METRIC_PATH

    assert speculative.generate is loop.generate and speculative.speculative_generate is loop.speculative_generate
    assert candidate.hf_assisted_generate is assisted.hf_assisted_generate
    assert smoothing.fit is lm_smoothing.fit
    assert PERPLEXITY_METRIC_PATH.endswith("infinigram_perplexity")
