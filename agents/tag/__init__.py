"""The TAG detection roles: root extractor, expander, pair screen, pair judges, explainer, vanilla detector.

Each role module holds its prompt constant, its output schema and one async function that calls the gateway.
Every output schema is documented in README.md ("Writing a script") so a person can write `scripted:` files.
"""
