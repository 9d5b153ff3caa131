"""budgetscope on Spark: the archive's Parquet read by Spark, and budgetscope's DuckDB SQL run there transpiled.

- `dialect`: DuckDB SQL → Spark SQL (SQLGlot, plus what it leaves to the engine);
- `session`: a SparkSession, with one-line errors when it cannot start;
- `archive`: an archive's committed segments as Spark views, and a connection the analysis code runs on;
- `commands`: `report`/`query --engine spark`; `derive`: `budgetscope derive`.

Needs the `spark` extra (pyspark, SQLGlot) and Java 17+. See docs/scale.md.
"""
