"""Leaf helpers every orchestration layer may import (``k8s/``, ``runtime/``,
``loadtest/``, ``tasks/``): the base error, the one poll loop, stopping a child's process
group. Imports nothing of ours."""
