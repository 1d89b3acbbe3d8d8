"""Encrypt dynamically configured passwords before they are stored (KIP-226).

The encoded form is Kafka's own: a comma-separated ``key:value`` list such as
``encryptedPassword:<b64>,passwordLength:8,salt:<b64>,iterations:4096,keyLength:128,
keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/CBC/PKCS5Padding,
initializationVector:<b64>`` (AES/GCM adds ``authenticationTagLength:128``). Binary values
are base64, the others plain text, and everything needed to decode travels with the value,
so changing the encoder settings never strands a stored password.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Collection

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

from kplane.broker.config.errors import ConfigException

__all__ = ["PasswordDecodeError", "PasswordEncoder", "parse_encoded", "reencode"]

ENCRYPTED_PASSWORD = "encryptedPassword"
PASSWORD_LENGTH = "passwordLength"
SALT = "salt"
ITERATIONS = "iterations"
KEY_LENGTH = "keyLength"
KEY_FACTORY_ALGORITHM = "keyFactoryAlgorithm"
CIPHER_ALGORITHM = "cipherAlgorithm"
INITIALIZATION_VECTOR = "initializationVector"
AUTHENTICATION_TAG_LENGTH = "authenticationTagLength"

DEFAULT_KEY_FACTORY_ALGORITHM = "PBKDF2WithHmacSHA512"
CBC = "AES/CBC/PKCS5Padding"
GCM = "AES/GCM/NoPadding"

_KEY_FACTORIES: dict[str, type[hashes.HashAlgorithm]] = {
    "PBKDF2WithHmacSHA1": hashes.SHA1,
    "PBKDF2WithHmacSHA224": hashes.SHA224,
    "PBKDF2WithHmacSHA256": hashes.SHA256,
    "PBKDF2WithHmacSHA384": hashes.SHA384,
    "PBKDF2WithHmacSHA512": hashes.SHA512,
}
_CIPHERS = (CBC, GCM)
_AES_KEY_LENGTHS = (128, 192, 256)
_SALT_BYTES = 256  # as Kafka
_IV_BYTES = {CBC: 16, GCM: 12}  # the JDK's defaults for these transformations
_GCM_TAG_BITS = 128


class PasswordDecodeError(ConfigException):
    """An encoded password that cannot be decoded: wrong secret, tampered or malformed."""


def _canonical(name: str, known: Collection[str], what: str) -> str:
    """Return the canonical spelling of ``name`` (JCA names are case-insensitive)."""
    for candidate in known:
        if candidate.lower() == name.strip().lower():
            return candidate
    raise ValueError(f"Unsupported {what} {name!r}; supported: {', '.join(known)}")


def _java_length(text: str) -> int:
    """``String.length()`` in Java: UTF-16 code units, which Kafka stores as passwordLength."""
    return len(text.encode("utf-16-le")) // 2


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def parse_encoded(encoded: str) -> dict[str, str]:
    """Split a stored value into its fields the way Kafka's ``Csv.parseCsvMap`` does."""
    fields: dict[str, str] = {}
    for entry in encoded.split(","):
        key, sep, value = entry.rpartition(":")
        if not sep:
            raise PasswordDecodeError("Password could not be decoded: malformed encoded value")
        fields[key.strip()] = value.strip()
    return fields


class PasswordEncoder:
    """Encodes and decodes passwords with a key derived from ``secret``."""

    __slots__ = ("_secret", "cipher_algorithm", "iterations", "key_factory_algorithm", "key_length")

    def __init__(
        self,
        secret: str,
        *,
        key_factory_algorithm: str | None = DEFAULT_KEY_FACTORY_ALGORITHM,
        cipher_algorithm: str = CBC,
        key_length: int = 128,
        iterations: int = 4096,
    ) -> None:
        if not secret:
            raise ValueError("The password encoder secret must not be empty")
        if key_length not in _AES_KEY_LENGTHS:
            raise ValueError(f"Invalid AES key length {key_length}; must be 128, 192 or 256")
        if iterations < 1:
            raise ValueError(f"Invalid iteration count {iterations}; must be positive")
        self._secret = secret
        self.key_factory_algorithm = _canonical(
            key_factory_algorithm or DEFAULT_KEY_FACTORY_ALGORITHM,
            _KEY_FACTORIES,
            "key factory algorithm",
        )
        self.cipher_algorithm = _canonical(cipher_algorithm, _CIPHERS, "cipher algorithm")
        self.key_length = key_length
        self.iterations = iterations

    def __repr__(self) -> str:
        return (
            f"PasswordEncoder(key_factory_algorithm={self.key_factory_algorithm!r}, "
            f"cipher_algorithm={self.cipher_algorithm!r}, key_length={self.key_length}, "
            f"iterations={self.iterations})"
        )

    def _key(self, key_factory: str, key_length: int, salt: bytes, iterations: int) -> bytes:
        kdf = PBKDF2HMAC(
            algorithm=_KEY_FACTORIES[key_factory](),
            length=key_length // 8,
            salt=salt,
            iterations=iterations,
        )
        return kdf.derive(self._secret.encode("utf-8"))

    def encode(self, password: str) -> str:
        """Encrypt ``password`` with a fresh salt and IV; return Kafka's stored form."""
        salt = os.urandom(_SALT_BYTES)
        iv = os.urandom(_IV_BYTES[self.cipher_algorithm])
        key = self._key(self.key_factory_algorithm, self.key_length, salt, self.iterations)
        plain = password.encode("utf-8")
        if self.cipher_algorithm == GCM:
            encrypted = AESGCM(key).encrypt(iv, plain, None)  # ciphertext || tag, as the JDK
        else:
            padder = padding.PKCS7(128).padder()
            encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
            padded = padder.update(plain) + padder.finalize()
            encrypted = encryptor.update(padded) + encryptor.finalize()
        fields = {
            ENCRYPTED_PASSWORD: _b64(encrypted),
            PASSWORD_LENGTH: str(_java_length(password)),
            SALT: _b64(salt),
            ITERATIONS: str(self.iterations),
            KEY_LENGTH: str(self.key_length),
            KEY_FACTORY_ALGORITHM: self.key_factory_algorithm,
            CIPHER_ALGORITHM: self.cipher_algorithm,
            INITIALIZATION_VECTOR: _b64(iv),
        }
        if self.cipher_algorithm == GCM:
            fields[AUTHENTICATION_TAG_LENGTH] = str(_GCM_TAG_BITS)
        return ",".join(f"{k}:{v}" for k, v in fields.items())

    def decode(self, encoded: str) -> str:
        """Decrypt a value produced by :meth:`encode` (or by Kafka) with this secret."""
        fields = parse_encoded(encoded)
        try:
            cipher = _canonical(fields[CIPHER_ALGORITHM], _CIPHERS, "cipher algorithm")
            key_factory = _canonical(
                fields.get(KEY_FACTORY_ALGORITHM, DEFAULT_KEY_FACTORY_ALGORITHM),
                _KEY_FACTORIES,
                "key factory algorithm",
            )
            key_length = int(fields[KEY_LENGTH])
            iterations = int(fields[ITERATIONS])
            length = int(fields[PASSWORD_LENGTH])
            salt = base64.b64decode(fields[SALT], validate=True)
            iv = base64.b64decode(fields[INITIALIZATION_VECTOR], validate=True)
            encrypted = base64.b64decode(fields[ENCRYPTED_PASSWORD], validate=True)
            if cipher == GCM and int(fields.get(AUTHENTICATION_TAG_LENGTH, "128")) != 128:
                raise ValueError("unsupported authenticationTagLength")
        except KeyError as e:
            raise PasswordDecodeError(
                f"Password could not be decoded: missing field {e.args[0]!r}"
            ) from None
        except (ValueError, binascii.Error) as e:
            raise PasswordDecodeError(f"Password could not be decoded: {e}") from None
        if key_length not in _AES_KEY_LENGTHS or iterations < 1:
            raise PasswordDecodeError("Password could not be decoded: invalid key parameters")
        key = self._key(key_factory, key_length, salt, iterations)
        try:
            if cipher == GCM:
                plain = AESGCM(key).decrypt(iv, encrypted, None)
            else:
                decryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
                unpadder = padding.PKCS7(128).unpadder()
                padded = decryptor.update(encrypted) + decryptor.finalize()
                plain = unpadder.update(padded) + unpadder.finalize()
            password = plain.decode("utf-8")
        except (InvalidTag, ValueError):
            raise PasswordDecodeError(
                "Password could not be decoded (wrong secret or tampered value)"
            ) from None
        if _java_length(password) != length:
            raise PasswordDecodeError(
                "Password could not be decoded, sanity check of length failed"
            )
        return password


def reencode(encoded: str, old: PasswordEncoder, new: PasswordEncoder) -> str:
    """Decode with ``old`` and encode with ``new``: ``password.encoder.old.secret`` rotation."""
    return new.encode(old.decode(encoded))
