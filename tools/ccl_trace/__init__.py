"""ccl-trace: read, explain, draw and summarise libccl chunk traces."""
