"""kplane: a Kafka-wire-compatible broker with Kafka's listener separation, its asyncio
client, Kafka's command-line tools and a pytest plugin, all under this one package."""
