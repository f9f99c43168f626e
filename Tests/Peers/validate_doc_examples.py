"""Validates every ```json example in docs/jobs.md and docs/results.md against the JSON Schema
(draft 2020-12) it illustrates, with the PyPI jsonschema library. Prints one JSON line:
{"examples": {doc: count}, "failures": [{doc, index, errors}]}; exits 1 when one fails."""
import json
import re
import sys

from jsonschema import Draft202012Validator

root = sys.argv[1] if len(sys.argv) > 1 else "."
report = {"examples": {}, "failures": []}
for doc, schema_path in [("docs/jobs.md", "docs/schemas/job.schema.json"), ("docs/results.md", "docs/schemas/result.schema.json")]:
    with open(f"{root}/{schema_path}") as f:
        schema = json.load(f)
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    with open(f"{root}/{doc}") as f:
        blocks = re.findall(r"```json\n(.*?)```", f.read(), re.S)
    report["examples"][doc] = len(blocks)
    for index, block in enumerate(blocks):
        errors = [error.message[:300] for error in validator.iter_errors(json.loads(block))]
        if errors:
            report["failures"].append({"doc": doc, "index": index, "errors": errors[:5]})
print(json.dumps(report))
sys.exit(1 if report["failures"] else 0)
