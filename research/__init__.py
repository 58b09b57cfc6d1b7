"""Research probes: one-off studies behind findings in the docs, kept runnable.

Not part of the installed package. Each probe reads runs through the results layer
(`mrbench.harness.record.results`) and may use the statistics, but never the CLI's own
modules (`.importlinter`, contract "research"); mrbench imports nothing from here.
"""
