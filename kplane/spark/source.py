"""The ``kplane`` data source: Spark's Kafka source and sink as a Python data source."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from kplane.spark.options import (
    OptionError,
    WriteOptions,
    read_options,
    refuse_unserved,
    write_options,
)
from kplane.spark.reader import KafkaBatchReader, KafkaStreamReader
from kplane.spark.schema import check_write_schema, read_schema
from kplane.spark.writer import KafkaBatchWriter, KafkaStreamWriter


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

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return KafkaBatchWriter(self._write_options(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return KafkaStreamWriter(self._write_options(schema, overwrite))

    def _write_options(self, schema: StructType, overwrite: bool) -> WriteOptions:
        if overwrite:
            raise OptionError(
                "save mode overwrite is not allowed on Kafka topics; use append or errorIfExists"
            )
        options = write_options(self.options)
        check_write_schema(schema, options.topic)
        return options
