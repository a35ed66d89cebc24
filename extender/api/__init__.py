"""HTTP edges: FastAPI app factory, wire models, extender and webhook routes."""
