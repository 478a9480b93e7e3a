"""LLM-inference capacity planner core.

config.json -> ModelSpec; hardware_profiles/*.yaml -> HardwareProfile; user's choices -> Scenario;
then memory plan, per-layer roofline and latency. This package imports neither streamlit nor torch
(only ``planner.bench`` imports torch, lazily, and nothing here imports it).
"""

__version__ = "0.1.0"
