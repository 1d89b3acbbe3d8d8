"""The ``kplane`` data source: Spark's Kafka source and sink as a Python data source."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from kplane.spark.options import OptionError, refuse_unserved
from kplane.spark.schema import read_schema

if TYPE_CHECKING:
    from kplane.spark.options import WriteOptions


class KplaneDataSource(DataSource):
    """``format("kplane")`` with the options of ``format("kafka")``."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        refuse_unserved(self.options)

    @classmethod
    def name(cls) -> str:
        return "kplane"

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return read_schema(include)

    # The readers and writers (kplane's client) are imported when asked for: Spark also
    # starts Python workers that only want the schema.
    def reader(self, schema: StructType) -> DataSourceReader:
        from kplane.spark.options import read_options
        from kplane.spark.reader import KafkaBatchReader

        return KafkaBatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from kplane.spark.options import read_options
        from kplane.spark.reader import KafkaStreamReader

        return KafkaStreamReader(read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kplane.spark.writer import KafkaBatchWriter

        return KafkaBatchWriter(self._write_options(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from kplane.spark.writer import KafkaStreamWriter

        return KafkaStreamWriter(self._write_options(schema, overwrite))

    def _write_options(self, schema: StructType, overwrite: bool) -> WriteOptions:
        from kplane.spark.options import write_options
        from kplane.spark.schema import check_write_schema

        if overwrite:
            raise OptionError(
                "save mode overwrite is not allowed on Kafka topics; use append or errorIfExists"
            )
        options = write_options(self.options)
        check_write_schema(schema, options.topic)
        return options
