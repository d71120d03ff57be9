"""Agent roles (prompts, output schemas, one gateway call each) and the model gateway every call goes through."""
