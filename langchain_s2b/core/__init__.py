"""Pure core: no I/O; imports neither FAISS nor any store (see docs/ARCHITECTURE.md)."""
