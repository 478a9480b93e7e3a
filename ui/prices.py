"""$/GPU-hour per card, set by the user on any page that costs a deployment (Compare, Simulate).

A profile's ``price_per_hour_usd`` is a cited, dated on-demand figure (or None). The user may set
their own per card; it is kept in ``st.session_state[PRICES_KEY]`` ({profile id: US dollars per
GPU-hour}) so a price typed on Compare also costs Simulate's search, and reaches the core as
``plan_slo(..., prices=...)`` or ``planner.hardware.priced(profile, prices)``. Only prices that differ
from the profile's are kept; an emptied field goes back to the profile's price.

Each page draws its own widgets (keys ``<page>_price_<card>``): Streamlit forgets a widget's value
when its page is left, so the value a field opens with comes from the shared dict.
"""

from __future__ import annotations

from collections.abc import Iterable

import streamlit as st

from planner.errors import PlannerError
from planner.hardware import HardwareProfile, check_price, get_profile, priced
from ui.errors import plain

PRICES_KEY = "user_prices_usd_per_gpu_hour"
"""Session key of the user's prices: {profile id: US dollars per GPU-hour}."""


def user_prices() -> dict[str, float]:
    """The prices the user set this session, {profile id: US dollars per GPU-hour}."""
    return dict(st.session_state.get(PRICES_KEY, {}))


def price_source(hw: HardwareProfile) -> str:
    """Where ``hw``'s price comes from: 'set by you', the profile's cited source, or 'no price'."""
    if hw.price_per_hour_usd is None:
        return "no price: type its $/GPU-hour"
    return hw.sources.get("price_per_hour_usd") or "the profile (no source given)"


def with_user_price(hw: HardwareProfile) -> HardwareProfile:
    """``hw`` at the user's price for its card, if they set one."""
    return priced(hw, user_prices())


def _widget_key(page: str, card: str) -> str:
    return f"{page}_price_{card}"


def _store(page: str, card: str, listed: float | None) -> None:
    """on_change of a price field: keep a valid price that differs from the profile's; drop an emptied one."""
    value = st.session_state.get(_widget_key(page, card))
    prices = user_prices()
    if value is None or value == listed:
        prices.pop(card, None)
    else:
        try:
            prices[card] = check_price(float(value), card, "$/GPU-hour")
        except PlannerError:
            prices.pop(card, None)
    st.session_state[PRICES_KEY] = prices


def price_inputs(cards: Iterable[str], page: str, columns: int = 4) -> dict[str, float]:
    """One $/GPU-hour field per card (its profile's price to start with, empty when it has none), and
    the user's prices after this run's edits. Draws in the current container."""
    ids = list(dict.fromkeys(cards))
    prices = user_prices()
    cols = st.columns(min(columns, max(1, len(ids))))
    for i, card in enumerate(ids):
        listed = get_profile(card).price_per_hour_usd
        cols[i % len(cols)].number_input(
            f"{card} $/GPU-hour",
            min_value=0.01,
            max_value=1000.0,
            value=prices.get(card, listed),
            step=0.1,
            format="%.4g",
            key=_widget_key(page, card),
            placeholder="no price: type one",
            on_change=_store,
            args=(page, card, listed),
            help=f"US dollars for one GPU for one hour. The profile's: {plain(price_source(get_profile(card)))}. "
            "Empty it to go back to the profile's price.",
        )
    return user_prices()


def unpriced(cards: Iterable[str]) -> list[str]:
    """The cards (profile ids) with neither a profile price nor one the user set."""
    return [c for c in dict.fromkeys(cards) if with_user_price(get_profile(c)).price_per_hour_usd is None]
