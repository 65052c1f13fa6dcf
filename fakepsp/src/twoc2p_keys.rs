//! The RSA keys of the 2C2P face's Payment Maintenance API ("Payment Action 2.0"), which 2C2P
//! and the merchant exchange at onboarding: 2C2P's key pair (the fake's own: it decrypts
//! requests and signs answers) and the merchant's (whose public half verifies requests and
//! encrypts answers). Test keys only: the fake serves the merchant's side of them at
//! `GET /_fake/2c2p/keys`.
//!
//! RSA is aws-lc-rs's, as for the PayPal face's webhook signatures; nothing here implements a
//! cryptographic primitive.

use std::fmt;

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::{
    KeyPair, KeySize, OaepPrivateDecryptingKey, OaepPublicEncryptingKey, PrivateDecryptingKey,
    PublicEncryptingKey,
};
use aws_lc_rs::signature::{KeyPair as _, UnparsedPublicKey, RSA_PSS_2048_8192_SHA256};

/// Why the 2C2P face's maintenance keys could not be made or read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TwoC2pKeyError(String);

impl fmt::Display for TwoC2pKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "2C2P maintenance keys: {}", self.0)
    }
}

impl std::error::Error for TwoC2pKeyError {}

/// The keys the 2C2P face's Payment Maintenance API works with
/// ([`FakePspConfig::twoc2p_maintenance_keys`](crate::FakePspConfig::twoc2p_maintenance_keys)),
/// as DER. Its `Debug` shows no private key.
#[derive(Clone, PartialEq, Eq)]
pub struct TwoC2pMaintenanceKeys {
    /// PKCS#8 DER of 2C2P's (the fake's) RSA private key, 2048 to 8192 bits: it decrypts the
    /// requests' JWE and signs the answers' JWS.
    pub twoc2p_private_key_pkcs8: Vec<u8>,
    /// X.509 `SubjectPublicKeyInfo` DER of the merchant's RSA public key, 2048 to 8192 bits: it
    /// verifies the requests' JWS and encrypts the answers' JWE.
    pub merchant_public_key_spki: Vec<u8>,
    /// PKCS#8 DER of the merchant's private key, if the fake is to serve it (at
    /// `GET /_fake/2c2p/keys` and in [`TwoC2pMerchantKeys`]); the fake itself never uses it.
    /// [`generate`](Self::generate) sets it; `None` serves `null`.
    pub merchant_private_key_pkcs8: Option<Vec<u8>>,
}

impl fmt::Debug for TwoC2pMaintenanceKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TwoC2pMaintenanceKeys(<RSA keys>)")
    }
}

impl TwoC2pMaintenanceKeys {
    /// Two new RSA-2048 key pairs, 2C2P's and the merchant's, with the merchant's private key
    /// kept to be served.
    pub fn generate() -> Result<Self, TwoC2pKeyError> {
        let generate = || {
            KeyPair::generate(KeySize::Rsa2048)
                .map_err(|_| TwoC2pKeyError("RSA key generation failed".to_owned()))
        };
        let (twoc2p, merchant) = (generate()?, generate()?);
        Ok(Self {
            twoc2p_private_key_pkcs8: pkcs8(&twoc2p)?,
            merchant_public_key_spki: spki(&merchant)?,
            merchant_private_key_pkcs8: Some(pkcs8(&merchant)?),
        })
    }

    /// The keys read for use; fails for DER that is not an RSA key of 2048 to 8192 bits of the
    /// kind each field names.
    pub(crate) fn parse(&self) -> Result<MaintenanceKeys, TwoC2pKeyError> {
        let rejected = |what: &str, error: &dyn fmt::Display| {
            TwoC2pKeyError(format!("{what} is not usable: {error}"))
        };
        let signing = KeyPair::from_pkcs8(&self.twoc2p_private_key_pkcs8)
            .map_err(|e| rejected("2C2P's private key (PKCS#8)", &e))?;
        let decrypting = PrivateDecryptingKey::from_pkcs8(&self.twoc2p_private_key_pkcs8)
            .map_err(|e| rejected("2C2P's private key (PKCS#8)", &e))
            .and_then(|key| {
                OaepPrivateDecryptingKey::new(key)
                    .map_err(|e| rejected("2C2P's private key (RSA-OAEP)", &e))
            })?;
        let twoc2p_public_key_spki = spki(&signing)?;
        let encrypting = PublicEncryptingKey::from_der(&self.merchant_public_key_spki)
            .map_err(|e| rejected("the merchant's public key (SPKI)", &e))
            .and_then(|key| {
                OaepPublicEncryptingKey::new(key)
                    .map_err(|e| rejected("the merchant's public key (RSA-OAEP)", &e))
            })?;
        let too_small = |bits: usize| !(2048..=8192).contains(&bits);
        if too_small(signing.public_modulus_len() * 8) || too_small(encrypting.key_size_bits()) {
            return Err(TwoC2pKeyError(
                "RSA keys must be 2048 to 8192 bits".to_owned(),
            ));
        }
        Ok(MaintenanceKeys {
            signing,
            decrypting,
            twoc2p_public_key_spki,
            merchant_public_key_spki: self.merchant_public_key_spki.clone(),
            encrypting,
            merchant_private_key_pkcs8: self.merchant_private_key_pkcs8.clone(),
        })
    }
}

/// The merchant's side of the 2C2P face's maintenance keys, as `GET /_fake/2c2p/keys` serves
/// them ([`RunningFakePsp::twoc2p_keys`](crate::RunningFakePsp::twoc2p_keys),
/// [`FakeModel::twoc2p_keys`](crate::model::FakeModel::twoc2p_keys)): what payonce's 2C2P
/// adapter is configured with. Test keys only. Its `Debug` shows no private key.
#[derive(Clone, PartialEq, Eq)]
pub struct TwoC2pMerchantKeys {
    /// PKCS#8 DER of the merchant's private key (signs requests, decrypts answers); `None` when
    /// the fake was configured without it.
    pub merchant_private_key_pkcs8: Option<Vec<u8>>,
    /// X.509 `SubjectPublicKeyInfo` DER of 2C2P's (the fake's) public key (encrypts requests,
    /// verifies answers).
    pub twoc2p_public_key_spki: Vec<u8>,
    /// The absolute URL of the fake's action endpoint,
    /// `<base_url>/2C2PFrontend/PaymentAction/2.0/action`.
    pub action_url: String,
}

impl fmt::Debug for TwoC2pMerchantKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoC2pMerchantKeys")
            .field("action_url", &self.action_url)
            .finish_non_exhaustive()
    }
}

/// The maintenance keys, read for use.
pub(crate) struct MaintenanceKeys {
    /// 2C2P's key pair: signs answers (PS256).
    pub(crate) signing: KeyPair,
    /// 2C2P's private key: decrypts the requests' content encryption keys (RSA-OAEP).
    pub(crate) decrypting: OaepPrivateDecryptingKey,
    /// 2C2P's public key, SPKI DER.
    pub(crate) twoc2p_public_key_spki: Vec<u8>,
    /// The merchant's public key, SPKI DER: verifies requests (PS256).
    pub(crate) merchant_public_key_spki: Vec<u8>,
    /// The merchant's public key: encrypts the answers' content encryption keys.
    pub(crate) encrypting: OaepPublicEncryptingKey,
    /// The merchant's private key, PKCS#8 DER, only to be served.
    pub(crate) merchant_private_key_pkcs8: Option<Vec<u8>>,
}

impl fmt::Debug for MaintenanceKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MaintenanceKeys(<RSA keys>)")
    }
}

impl MaintenanceKeys {
    /// The merchant's public key as a PS256 verifier.
    pub(crate) fn merchant_verifier(&self) -> UnparsedPublicKey<&[u8]> {
        UnparsedPublicKey::new(&RSA_PSS_2048_8192_SHA256, &self.merchant_public_key_spki)
    }

    /// The merchant's side, with the action endpoint at `action_url`.
    pub(crate) fn merchant_side(&self, action_url: String) -> TwoC2pMerchantKeys {
        TwoC2pMerchantKeys {
            merchant_private_key_pkcs8: self.merchant_private_key_pkcs8.clone(),
            twoc2p_public_key_spki: self.twoc2p_public_key_spki.clone(),
            action_url,
        }
    }
}

/// PKCS#8 DER of `key`.
fn pkcs8(key: &KeyPair) -> Result<Vec<u8>, TwoC2pKeyError> {
    key.as_der()
        .map(|der| der.as_ref().to_vec())
        .map_err(|_| TwoC2pKeyError("PKCS#8 export failed".to_owned()))
}

/// SPKI DER of `key`'s public half.
fn spki(key: &KeyPair) -> Result<Vec<u8>, TwoC2pKeyError> {
    key.public_key()
        .as_der()
        .map(|der| der.as_ref().to_vec())
        .map_err(|_| TwoC2pKeyError("public key export failed".to_owned()))
}
