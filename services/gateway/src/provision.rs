//! First-login provisioning against today's users file ([`UserStore::provision`]): the seam
//! [`crate::oidc::Provision`] the OpenID Connect code calls, kept apart so that the users
//! directory replacing the file only has to implement that trait.

use futures::future::BoxFuture;
use snug_identity::Claims;

use crate::{
    oidc::{Provision, ProvisionedUser},
    users::UserStore,
};

impl Provision for UserStore {
    fn provision<'a>(
        &'a self,
        claims: &'a Claims,
    ) -> BoxFuture<'a, Result<Option<ProvisionedUser>, String>> {
        Box::pin(async move {
            let user = UserStore::provision(
                self,
                &claims.issuer,
                &claims.subject,
                claims.display_name.as_deref(),
            )
            .map_err(|e| e.to_string())?;
            Ok(user.map(|u| ProvisionedUser {
                id: u.id,
                name: u.name,
            }))
        })
    }
}

/// No directory (auth off): nobody is provisioned. Used only to check the settings.
#[derive(Debug)]
pub struct Nobody;

impl Provision for Nobody {
    fn provision<'a>(
        &'a self,
        _: &'a Claims,
    ) -> BoxFuture<'a, Result<Option<ProvisionedUser>, String>> {
        Box::pin(async { Ok(None) })
    }
}
