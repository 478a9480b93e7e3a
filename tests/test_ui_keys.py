"""The keys the app caches and replays under: a pickle's digest (``ui.derived.digest``), for tables, figures'
inputs and frozen core models (``ui.sweeps.frozen_key``); equal data share a key, changed data do not."""

from __future__ import annotations


def test_the_table_key_is_its_pickles_digest():
    import pandas as pd

    from ui.derived import digest

    def table(t: float) -> pd.DataFrame:
        return pd.DataFrame({"op": ["a", "b"], "t": [t, 0.5]})

    assert digest(table(0.0012)) == digest(table(0.0012))  # rebuilt each rerun: one key
    assert digest(table(0.0012)) != digest(table(0.0013))
    assert digest(table(0.0012)) != digest(table(0.0012).rename(columns={"t": "seconds"}))
    assert digest(lambda: 1) is None  # what does not pickle has no digest: the caller hashes it another way


def test_frozen_core_models_are_keyed_by_their_pickle():
    """ui.sweeps keys a spec, card or scenario by its pickle's digest: equal objects built apart share a key, a
    changed field does not; a 70B spec's key is the digest of ~1 KB (its layers are shared objects), not of its JSON."""
    from planner.hardware import get_profile
    from planner.model.families import build_spec
    from planner.model.sources import load_config
    from planner.scenario import Scenario
    from ui.sweeps import frozen_key

    def spec():
        return build_spec(load_config("meta-llama/Llama-3.1-70B").config, "meta-llama/Llama-3.1-70B")

    assert frozen_key(spec()) == frozen_key(spec())
    assert frozen_key(Scenario(tp=2)) == frozen_key(Scenario(tp=2)) != frozen_key(Scenario(tp=4))
    assert frozen_key(get_profile("h100-sxm")) != frozen_key(get_profile("a100-80gb"))
    assert isinstance(frozen_key(spec()), bytes) and len(frozen_key(spec())) == 20
