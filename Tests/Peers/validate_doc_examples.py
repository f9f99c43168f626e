#!/usr/bin/env python3
"""Validates every ```json example in docs/jobs.md and docs/results.md against the JSON Schemas
in docs/schemas (jsonschema, draft 2020-12). Prints one line per example, and exits 1 if any
example is invalid. Usage: validate_doc_examples.py <repository root>"""
import json
import re
import sys

from jsonschema import Draft202012Validator

root = sys.argv[1] if len(sys.argv) > 1 else "."
failures = 0
for document, schema in [("docs/jobs.md", "docs/schemas/job.schema.json"), ("docs/results.md", "docs/schemas/result.schema.json")]:
    with open(f"{root}/{schema}") as f:
        validator = Draft202012Validator(json.load(f))
    with open(f"{root}/{document}") as f:
        text = f.read()
    examples = re.findall(r"```json\n(.*?)```", text, re.S)
    if not examples:
        print(f"FAIL {document}: no json examples")
        failures += 1
    for number, example in enumerate(examples, 1):
        errors = [e.message for e in validator.iter_errors(json.loads(example))]
        status = "FAIL" if errors else "ok"
        failures += 1 if errors else 0
        print(f"{status} {document} example {number}" + (f": {errors[0]}" if errors else ""))
sys.exit(1 if failures else 0)
