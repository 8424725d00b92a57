"""The compile driver: `dp.compile`, the pipelines and options of each plan, the disk-cache
protocol, and the compile of a loop program's pieces."""
