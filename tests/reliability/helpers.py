"""Waiting helpers of the reliability tests."""

from __future__ import annotations
