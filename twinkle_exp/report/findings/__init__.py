"""Findings: the published claims of `conf/sweep/finding_*.yaml`, each decided from a sweep's runs
(`python -m twinkle_exp.report.findings DIR --finding NAME`)."""
