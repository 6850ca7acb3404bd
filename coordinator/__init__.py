"""The coordinator: a stateless FastAPI service over Redis that applies agents' votes atomically."""
