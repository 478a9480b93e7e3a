"""Widgets, charts and state shared by the Streamlit pages; the page contract lives here.

``app.py`` is the frame: it draws the sidebar (``ui.sidebar.render``), which holds every
scenario input under a fixed session-state key bound to the URL (``ui.params``), then routes to
one page under ``views/`` with ``st.navigation``. A page is a thin view: it reads the current
inputs, calls ``planner``, and draws. It does no arithmetic of its own; a number the core does not
return comes from a small pure function in ``ui.derived`` (or a cached sweep in ``ui.sweeps``).
All eight pages (Plan, Roofline, Latency, Compare, Export, Validate, Simulate, Diagnose) follow
the contract below; ``tests/test_app.py`` walks every page through it.

The page contract
-----------------

::

    import streamlit as st
    from ui.errors import shown_errors
    from ui.state import current_inputs

    st.title("My page")
    inputs = current_inputs()          # Inputs(model, hardware, scenario, resolved, source, loaded, draft)
    with shown_errors():               # PlannerError / ValidationError -> st.error, then st.stop()
        plan = plan_memory(inputs.model, inputs.hardware, inputs.scenario)
    st.success(plan.reason)

* Draw the page title first, then call ``current_inputs()`` before any page widget: it returns a
  frozen :class:`ui.state.Inputs`:

  - ``model``: the ``planner.model.spec.ModelSpec`` of the chosen model (catalog pick, Hub repo
    id, or uploaded config.json; loading is cached with ``st.cache_data``);
  - ``hardware``: the ``planner.hardware.HardwareProfile`` of the chosen card;
  - ``scenario``: the ``planner.scenario.Scenario`` (TP/PP, dtypes, vLLM limits, engine, workload);
  - ``resolved``: ``planner.estimate.resolve.resolve(...)`` of the three, i.e. every vLLM default
    filled in and the combination checked (TP divides the heads, max_model_len fits the model);
  - ``source``: where the config came from (``name``, ``origin``, ``citation``, ``warnings``
    of the loader and of the spec builder), for captions;
  - ``loaded``: the ``planner.model.sources.LoadedConfig`` itself, for core calls that want it
    (``planner.deploy.export.export_bundle(..., loaded=inputs.loaded)``);
  - ``draft``: the draft model's ``ModelSpec`` when the sidebar's speculative method is ``draft`` (else None),
    for the core calls that cost speculative steps (``estimate_latency(..., draft_model=inputs.draft)``).

  When the inputs cannot be used (unknown repo, gated repo without a token, an upload that is
  not a config.json, TP not dividing the heads, ...), ``current_inputs()`` shows one
  ``st.error`` under the title saying what is wrong and what to do, and stops the page with
  ``st.stop()``. The sidebar and the navigation stay usable; the next change reruns the page.
  ``scenario.max_model_len`` is the sidebar's: empty by default, i.e. the model's maximum, as vLLM and
  ``python -m planner`` default (``resolved.max_model_len`` is the number; ``ui.format.fmt_max_model_len``
  says it on the page).
* Errors from the core are shown, never raised: wrap calls in ``with shown_errors():`` (stops the
  page after the ``st.error``), or use ``ui.errors.describe(err)`` to show a message and carry
  on (the Compare page does this per scenario). Never let a traceback reach the page.
* Page-local widgets take keys prefixed with the page name (``"roofline_mode"``) so they never
  collide with the shared scenario keys listed in ``ui.params.PARAMS``. Keys in that table are
  the URL's query parameters; do not write ``st.query_params`` for them yourself.
* Sidebar keys and Scenario fields meet in one table: each ``ui.params.PARAMS`` row names the
  field it sets (``Param.field``). ``ui.state.scenario_from`` reads the sidebar through it, and
  its inverse ``ui.params.sidebar_updates`` turns Scenario field changes back into sidebar
  values: ``ui.params.apply_to_sidebar(changes)`` (as a button's ``on_click``) sets them, and
  ``ui.state.link_to(page, changes)`` makes a link to another page with them. A page never
  spells a sidebar key for a Scenario field itself.
* The Hugging Face token lives only in ``st.session_state["hf_token"]``. It is never shown,
  never put in the URL; ``ui.loaders`` gets it for model loading, and a core call that loads a
  config by name itself takes ``ui.state.hub_token()``.
* Every predicted number says what it is: ``bound``, ``estimate`` or ``calibrated``
  (``ui.format.KIND_HELP``; the sidebar shows the legend).
* One caching style: heavy or repeated core calls go through the ``st.cache_data`` helpers in
  ``ui.sweeps`` (and ``ui.serving`` for the Simulate and Diagnose pages' simulations, so the first page does
  not import the simulator); a page defines no cache of its own. Figures come from ``ui.charts``; a figure object is
  never cached (it would be one mutable object shared by every session): a page draws one with
  ``ui.format.plotted(builder, *inputs, key=...)``, which replays the drawn element from ``st.cache_data`` while
  the builder's inputs are unchanged (keyed by their pickle's digest, ``ui.derived.digest``).
  A page imports no plotly; the tables it shows that are more than a list of a core result's
  fields come from ``ui.derived`` (or ``ui.validate``), and a table shown through formatters is drawn with
  ``ui.format.formatted_table(table, formats)`` (``st.dataframe`` of ``ui.derived.readable``, pandas' strings
  kept in Python: 1.3-2.5x faster to marshal; the element replayed from ``st.cache_data`` while the table,
  its formatters and arguments are unchanged, so an unchanged rerun marshals no table).

Modules: ``params`` (the shared inputs, their defaults, URL codecs and Scenario fields), ``sidebar`` (draws them),
``state`` (turns them into ``Inputs``), ``loaders`` (cached model loading), ``sweeps`` (cached core
calls and sweeps), ``serving`` (cached simulations, rate sweeps, SLO searches and scores), ``derived``
(small pure functions over core results), ``charts`` (plotly figures), ``format`` (numbers and labels),
``errors`` (error translation), ``validate`` (the Validate page's torch-free GPU scan and report tables).
"""
