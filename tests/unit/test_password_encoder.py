"""KIP-226 password encoder: Kafka's stored format, secrets, rotation and tampering."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.password_encoder import (
    PasswordDecodeError,
    PasswordEncoder,
    parse_encoded,
    reencode,
)

SECRET = "encoder-secret"
PASSWORDS = [
    "password1",
    "",
    "p@ss,word:with=separators",
    "pässwörd-ünïcødé",
    "密码🔑emoji",
    "x" * 100,
]
KAFKA_KEYS = {
    "encryptedPassword",
    "passwordLength",
    "salt",
    "iterations",
    "keyLength",
    "keyFactoryAlgorithm",
    "cipherAlgorithm",
    "initializationVector",
}


def _encoder(secret: str = SECRET, **kwargs: Any) -> PasswordEncoder:
    kwargs.setdefault("iterations", 1024)  # keep the tests quick
    return PasswordEncoder(secret, **kwargs)


def _replace(encoded: str, key: str, value: str) -> str:
    fields = parse_encoded(encoded)
    fields[key] = value
    return ",".join(f"{k}:{v}" for k, v in fields.items())


@pytest.mark.parametrize("cipher", ["AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"])
@pytest.mark.parametrize("password", PASSWORDS)
def test_round_trip(cipher: str, password: str) -> None:
    encoder = _encoder(cipher_algorithm=cipher)
    assert encoder.decode(encoder.encode(password)) == password


def test_stored_format_matches_kafka() -> None:
    encoded = _encoder().encode("password1")
    fields = parse_encoded(encoded)
    assert set(fields) == KAFKA_KEYS
    assert fields["keyFactoryAlgorithm"] == "PBKDF2WithHmacSHA512"
    assert fields["cipherAlgorithm"] == "AES/CBC/PKCS5Padding"
    assert fields["keyLength"] == "128"
    assert fields["passwordLength"] == "9"
    assert len(base64.b64decode(fields["salt"])) == 256
    assert len(base64.b64decode(fields["initializationVector"])) == 16
    assert len(base64.b64decode(fields["encryptedPassword"])) == 16


def test_gcm_stores_tag_length() -> None:
    fields = parse_encoded(_encoder(cipher_algorithm="AES/GCM/NoPadding").encode("pw"))
    assert set(fields) == KAFKA_KEYS | {"authenticationTagLength"}
    assert fields["authenticationTagLength"] == "128"
    assert len(base64.b64decode(fields["initializationVector"])) == 12


def test_password_length_counts_utf16_units_like_java() -> None:
    fields = parse_encoded(_encoder().encode("a🔑"))
    assert fields["passwordLength"] == "3"


def test_default_key_factory_when_unset() -> None:
    encoder = _encoder(key_factory_algorithm=None)
    encoded = encoder.encode("pw")
    assert parse_encoded(encoded)["keyFactoryAlgorithm"] == "PBKDF2WithHmacSHA512"
    without = ",".join(
        f"{k}:{v}" for k, v in parse_encoded(encoded).items() if k != "keyFactoryAlgorithm"
    )
    assert encoder.decode(without) == "pw"


def test_sha1_key_factory_round_trip() -> None:
    encoder = _encoder(key_factory_algorithm="PBKDF2WithHmacSHA1")
    encoded = encoder.encode("pw")
    assert parse_encoded(encoded)["keyFactoryAlgorithm"] == "PBKDF2WithHmacSHA1"
    assert encoder.decode(encoded) == "pw"


def test_two_encodes_differ() -> None:
    encoder = _encoder()
    first, second = encoder.encode("same-password"), encoder.encode("same-password")
    assert first != second
    a, b = parse_encoded(first), parse_encoded(second)
    assert a["salt"] != b["salt"]
    assert a["initializationVector"] != b["initializationVector"]
    assert a["encryptedPassword"] != b["encryptedPassword"]


@pytest.mark.parametrize("password", ["hunter22", "pässwörd-ünïcødé"])
def test_stored_value_has_no_clear_password(password: str) -> None:
    encoder = _encoder()
    encoded = encoder.encode(password)
    assert password not in encoded
    assert SECRET not in encoded
    assert SECRET not in repr(encoder)


@pytest.mark.parametrize("cipher", ["AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"])
def test_wrong_secret_fails_cleanly(cipher: str) -> None:
    encoded = _encoder(cipher_algorithm=cipher).encode("hunter22")
    with pytest.raises(PasswordDecodeError) as info:
        _encoder("another-secret", cipher_algorithm=cipher).decode(encoded)
    message = str(info.value)
    assert "could not be decoded" in message
    assert "hunter22" not in message and SECRET not in message
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, ConfigException)


def test_rotation_with_reencode() -> None:
    old = _encoder("old-secret")
    new = _encoder("new-secret", cipher_algorithm="AES/GCM/NoPadding", key_length=256)
    stored = old.encode("keystore-password")
    rotated = reencode(stored, old, new)
    assert new.decode(rotated) == "keystore-password"
    with pytest.raises(PasswordDecodeError):
        old.decode(rotated)
    with pytest.raises(PasswordDecodeError):
        reencode(rotated, old, new)


def test_decode_uses_stored_parameters_not_own() -> None:
    writer = _encoder(key_length=256, iterations=2048, key_factory_algorithm="PBKDF2WithHmacSHA1")
    reader = _encoder()  # same secret, different settings
    assert reader.decode(writer.encode("pw")) == "pw"


def test_key_length_and_iterations_are_honoured() -> None:
    encoded = _encoder(key_length=256, iterations=5000).encode("pw")
    fields = parse_encoded(encoded)
    assert fields["keyLength"] == "256"
    assert fields["iterations"] == "5000"
    # The stored parameters are the ones used: changing either breaks decoding.
    encoder = _encoder()
    assert encoder.decode(encoded) == "pw"
    for key, value in (("keyLength", "128"), ("iterations", "4999")):
        with pytest.raises(PasswordDecodeError):
            encoder.decode(_replace(encoded, key, value))


def test_key_length_192() -> None:
    encoder = _encoder(key_length=192)
    encoded = encoder.encode("pw")
    assert parse_encoded(encoded)["keyLength"] == "192"
    assert encoder.decode(encoded) == "pw"


@pytest.mark.parametrize("cipher", ["AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"])
def test_tampered_ciphertext_fails(cipher: str) -> None:
    encoder = _encoder(cipher_algorithm=cipher)
    encoded = encoder.encode("hunter22")
    raw = bytearray(base64.b64decode(parse_encoded(encoded)["encryptedPassword"]))
    raw[-1] ^= 0x01
    tampered = _replace(encoded, "encryptedPassword", base64.b64encode(bytes(raw)).decode())
    with pytest.raises(PasswordDecodeError):
        encoder.decode(tampered)


def test_tampered_length_fails_sanity_check() -> None:
    encoder = _encoder()
    encoded = encoder.encode("hunter22")
    with pytest.raises(PasswordDecodeError, match="sanity check"):
        encoder.decode(_replace(encoded, "passwordLength", "7"))


@pytest.mark.parametrize(
    "encoded",
    [
        "garbage",
        "encryptedPassword:AAAA",
        "encryptedPassword:!!!,passwordLength:1,salt:AA==,iterations:1024,keyLength:128,"
        "cipherAlgorithm:AES/CBC/PKCS5Padding,initializationVector:AA==",
    ],
)
def test_malformed_values_fail_cleanly(encoded: str) -> None:
    with pytest.raises(PasswordDecodeError):
        _encoder().decode(encoded)


def test_unknown_stored_algorithm_fails() -> None:
    encoder = _encoder()
    encoded = _replace(encoder.encode("pw"), "cipherAlgorithm", "DES/CBC/PKCS5Padding")
    with pytest.raises(PasswordDecodeError, match="DES/CBC/PKCS5Padding"):
        encoder.decode(encoded)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"cipher_algorithm": "DES/CBC/PKCS5Padding"}, "DES/CBC/PKCS5Padding"),
        ({"cipher_algorithm": "AES/ECB/PKCS5Padding"}, "AES/ECB/PKCS5Padding"),
        ({"key_factory_algorithm": "PBKDF2WithHmacMD5"}, "PBKDF2WithHmacMD5"),
        ({"key_length": 64}, "64"),
        ({"key_length": 512}, "512"),
        ({"iterations": 0}, "0"),
    ],
)
def test_invalid_parameters_raise_value_error(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        _encoder(**kwargs)


def test_empty_secret_rejected() -> None:
    with pytest.raises(ValueError):
        PasswordEncoder("")


def test_algorithm_names_are_case_insensitive() -> None:
    encoder = _encoder(
        key_factory_algorithm="pbkdf2withhmacsha512", cipher_algorithm="aes/gcm/nopadding"
    )
    fields = parse_encoded(encoder.encode("pw"))
    assert fields["keyFactoryAlgorithm"] == "PBKDF2WithHmacSHA512"
    assert fields["cipherAlgorithm"] == "AES/GCM/NoPadding"
