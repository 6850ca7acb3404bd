"""HTTP routes under /v1, each module with the schemas it speaks."""
