"""A day of drift (issue 38): scenarios that script a compressed day of traffic, changes and faults."""
