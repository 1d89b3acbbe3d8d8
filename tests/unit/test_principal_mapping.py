"""ssl.principal.mapping.rules: Kafka's SslPrincipalMapper semantics (KIP-371)."""

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from kplane.broker.security.principal_mapping import (
    NoMatchingRuleError,
    Rule,
    SslPrincipalMapper,
    parse_rules,
)

KAFKA_EXAMPLE = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "DEFAULT"
)


def name(rules: str, dn: str) -> str:
    return parse_rules(rules).get_name(dn)


def test_default_returns_the_dn_unchanged() -> None:
    dn = "CN=client,OU=kplane,O=Example"
    assert name("DEFAULT", dn) == dn
    assert parse_rules(None).get_name(dn) == dn  # unset: Kafka's default is DEFAULT
    assert SslPrincipalMapper.from_rules("DEFAULT").get_name(dn) == dn


def test_kafka_documentation_example_with_commas_inside_patterns() -> None:
    mapper = parse_rules(KAFKA_EXAMPLE)
    assert [str(rule) for rule in mapper.rules] == [
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "DEFAULT",
    ]
    assert mapper.get_name("CN=Duke,OU=ServiceUsers,O=Org,L=City,ST=State,C=US") == "Duke"
    assert mapper.get_name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.get_name("CN=Duke,OU=JavaSoft,O=Sun") == "CN=Duke,OU=JavaSoft,O=Sun"


def test_comma_inside_a_quantifier() -> None:
    assert name("RULE:^CN=([a-z]{1,3}),.*$/$1/", "CN=abc,O=x") == "abc"
    with pytest.raises(NoMatchingRuleError):
        name("RULE:^CN=([a-z]{1,3}),.*$/$1/", "CN=abcd,O=x")


@pytest.mark.parametrize(
    ("flag", "expected"), [("", "Alice@Ops"), ("L", "alice@ops"), ("U", "ALICE@OPS")]
)
def test_case_flags(flag: str, expected: str) -> None:
    assert name(f"RULE:^CN=(.*?),OU=(.*?)$/$1@$2/{flag}", "CN=Alice,OU=Ops") == expected


def test_first_matching_rule_wins() -> None:
    rules = "RULE:^CN=(.*?),OU=Admins$/admin-$1/,RULE:^CN=(.*?),.*$/$1/,DEFAULT"
    assert name(rules, "CN=bob,OU=Admins") == "admin-bob"
    assert name(rules, "CN=bob,OU=Users") == "bob"
    assert name(rules, "O=NoCommonName") == "O=NoCommonName"
    # DEFAULT first shadows everything after it.
    assert name("DEFAULT,RULE:^CN=(.*?),.*$/$1/", "CN=bob,OU=Users") == "CN=bob,OU=Users"


def test_pattern_must_match_the_whole_dn() -> None:
    # "CN=client" is a prefix of the DN: Java's matches(), not find(), decides.
    assert name("RULE:CN=client/matched/,DEFAULT", "CN=client,OU=x") == "CN=client,OU=x"
    assert name("RULE:CN=client/matched/,DEFAULT", "CN=client") == "matched"


@pytest.mark.parametrize(
    ("replacement", "expected"),
    [
        ("$2-$1", "ops-alice"),
        ("$0", "CN=alice,OU=ops"),  # whole match
        ("$12", "alice2"),  # two groups: $12 is $1 then "2", as in Java
        ("$3", "$3"),  # no group 3: literal, as Kafka escapes it
        ("x$", None),  # a lone $ is an illegal group reference
        ("\\$1", "$1"),  # escaped $
        ("a\\\\b", "a\\b"),  # escaped backslash
        ("a\\/b", "a/b"),  # escaped slash
        ("${user}", None),  # no such named group
    ],
)
def test_replacement_group_references(replacement: str, expected: str | None) -> None:
    rules = f"RULE:^CN=(.*?),OU=(.*?)$/{replacement}/"
    if expected is None:
        with pytest.raises(ValueError, match="replacement"):
            parse_rules(rules)
    else:
        assert name(rules, "CN=alice,OU=ops") == expected


def test_named_and_optional_groups() -> None:
    assert name("RULE:^CN=(?P<user>[^,]*)(,OU=(x))?.*$/${user}:$3/", "CN=u,O=o") == "u:"
    assert name("RULE:^CN=(?P<user>[^,]*)(,OU=(x))?.*$/${user}:$3/", "CN=u,OU=x") == "u:x"


def test_escaped_slash_in_pattern() -> None:
    assert name("RULE:^CN=a\\/b,(.*)$/$1/", "CN=a/b,O=x") == "O=x"


def test_replacement_is_applied_like_java_replace_all() -> None:
    # Kafka runs dn.replaceAll(pattern, replacement): "(.*)" also matches the empty
    # string at the end, so the replacement is appended a second time.
    assert name("RULE:(.*)/u-$1/", "CN=a") == "u-CN=au-"
    assert name("RULE:^(.*)$/u-$1/", "CN=a") == "u-CN=a"


def test_java_default_character_classes_are_ascii() -> None:
    rules = "RULE:^CN=(\\w+)$/$1/,DEFAULT"
    assert name(rules, "CN=jose") == "jose"
    assert name(rules, "CN=jos\u00e9") == "CN=jos\u00e9"


def test_whitespace_and_newlines_between_rules() -> None:
    rules = (
        "  RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/ ,\n"
        "\tRULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L\n,\n"
        "  DEFAULT  \n"
    )
    mapper = parse_rules(rules)
    assert len(mapper.rules) == 3
    assert mapper.get_name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.get_name("O=x") == "O=x"


def test_empty_entries_are_skipped() -> None:
    assert [str(r) for r in parse_rules(",DEFAULT,,").rules] == ["DEFAULT"]


def test_no_rule_matches() -> None:
    mapper = parse_rules("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L")
    with pytest.raises(NoMatchingRuleError) as info:
        mapper.get_name("CN=bob,OU=Users")
    assert str(info.value) == (
        "No rules apply to CN=bob,OU=Users, rules [RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L]"
    )
    # An empty value has no rules at all (Kafka's behaviour): nothing maps.
    with pytest.raises(NoMatchingRuleError):
        parse_rules("   ").get_name("CN=bob")


@pytest.mark.parametrize(
    ("rules", "named"),
    [
        ("RULE:^CN=(.*)$", "missing '/' after the pattern"),
        ("RULE:^CN=(.*)$/$1", "missing '/' after the replacement"),
        ("RULE:^CN=(.*)$/$1,DEFAULT", "RULE:^CN=(.*)$/$1,DEFAULT"),
        ("RULE:^CN=(.*)$/$1/X", "'X'"),
        ("RULE:^CN=(.*)$/$1/LU", "'U'"),
        ("RULE:^CN=(.*)$/$1/ L", "'L'"),
        ("RULE:^CN=(.*)$/$1/trailing,DEFAULT", "'trailing'"),
        ("garbage", "'garbage'"),
        ("DEFAULT,garbage here,RULE:a/b/", "'garbage here'"),
        ("DEFAULTS", "'DEFAULTS'"),
        ("default", "'default'"),
        ("RULE:^CN=(unclosed$/$1/", "invalid regular expression '^CN=(unclosed$'"),
        ("RULE:^CN=(.*)$/$1\\", "missing '/'"),
        ("RULE:^CN=(.*)$/$x/", "illegal group reference"),
    ],
)
def test_malformed_rules(rules: str, named: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_rules(rules)
    assert named in str(info.value)


def test_rule_objects() -> None:
    assert Rule().is_default and Rule().apply("CN=x") == "CN=x"
    assert Rule("^CN=(.*)$", "$1", "U").apply("CN=x") == "X"
    assert Rule("^CN=(.*)$", "$1").apply("O=x") is None
    with pytest.raises(ValueError, match="case flag"):
        Rule("a", "b", "Q")


def test_dn_as_the_broker_formats_it() -> None:
    # tls.principal_of uses cryptography's RFC 4514 string: most specific RDN first and
    # ',' inside a value escaped, like Java's RFC 2253 form.
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "kplane"),
            x509.NameAttribute(NameOID.COMMON_NAME, "Client, One"),
        ]
    )
    dn = subject.rfc4514_string()
    assert dn == "CN=Client\\, One,OU=kplane,O=Example,C=US"
    rules = "RULE:^CN=((?:\\\\,|[^,])*),OU=kplane,.*$/$1/L,DEFAULT"
    assert name(rules, dn) == "client\\, one"
