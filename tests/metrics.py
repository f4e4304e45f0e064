"""Scraping a service's `/metrics` in tests: over HTTP, parsed by prometheus_client's own parser."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

#: (sample name, sorted label pairs) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape_text(url: str) -> str:
    """GET `url` (a service's metrics URL); the text, after checking status and content type."""
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200, resp.status
        assert resp.headers["Content-Type"].startswith("text/plain")
        return await resp.text()


def samples_of(text: str) -> Samples:
    """Every sample of an exposition by name and labels (parsing fails on malformed text)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def types_of(text: str) -> dict[str, str]:
    """Family name -> its type (counter, gauge, histogram, ...)."""
    return {family.name: family.type for family in text_string_to_metric_families(text)}


async def scrape(url: str) -> Samples:
    """The samples a metrics URL serves now."""
    return samples_of(await scrape_text(url))


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (KeyError naming what is there when it is missing)."""
    key = (name, tuple(sorted(labels.items())))
    if key not in samples:
        present = sorted({k for k in samples if k[0] == name})
        raise KeyError(f"{key} not scraped; series of {name}: {present}")
    return samples[key]
