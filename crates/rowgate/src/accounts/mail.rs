//! Email to people (`accounts.smtp_url`): the confirmation of a new account, a magic link (with
//! its one-time code) and a password recovery, sent through an SMTP server with lettre, from
//! templates as Supabase's (built in, or a folder of minijinja files whose first line is
//! `Subject: …`). A template sees `confirmation_url`, `token` (the six-digit code),
//! `token_hash`, `site_url`, `redirect_to`, `email`, `new_email` (where the email goes: an
//! email change's new address) and `data` (the `user_metadata`).

use std::time::Duration;

use anyhow::Context as _;
use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde_json::Value as Json;

use crate::config::{AccountsConfig, ConfigDir};

/// Which email.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Confirm a new account.
    Confirmation,
    /// Sign in by a link or code.
    MagicLink,
    /// Reset a forgotten password.
    Recovery,
    /// Confirm a new address (sent to it).
    EmailChange,
}

impl Kind {
    fn template(self) -> &'static str {
        match self {
            Kind::Confirmation => "confirmation.html",
            Kind::MagicLink => "magic_link.html",
            Kind::Recovery => "recovery.html",
            Kind::EmailChange => "email_change.html",
        }
    }
}

/// Supabase's default emails, with the code beside the link.
const BUILT_IN: &[(&str, &str)] = &[
    (
        "confirmation.html",
        "Subject: Confirm Your Signup\n<h2>Confirm your signup</h2>\n\
         <p>Follow this link to confirm your user:</p>\n\
         <p><a href=\"{{ confirmation_url }}\">Confirm your mail</a></p>\n\
         <p>Or enter this code: {{ token }}</p>\n",
    ),
    (
        "magic_link.html",
        "Subject: Your Magic Link\n<h2>Magic Link</h2>\n\
         <p>Follow this link to login:</p>\n\
         <p><a href=\"{{ confirmation_url }}\">Log In</a></p>\n\
         <p>Or enter this code: {{ token }}</p>\n",
    ),
    (
        "recovery.html",
        "Subject: Reset Your Password\n<h2>Reset Password</h2>\n\
         <p>Follow this link to reset the password for your user:</p>\n\
         <p><a href=\"{{ confirmation_url }}\">Reset Password</a></p>\n\
         <p>Or enter this code: {{ token }}</p>\n",
    ),
    (
        "email_change.html",
        "Subject: Confirm Change Of Email\n<h2>Confirm Change of Email</h2>\n\
         <p>Follow this link to confirm the update of your email from {{ email }} to \
         {{ new_email }}:</p>\n\
         <p><a href=\"{{ confirmation_url }}\">Change Email</a></p>\n\
         <p>Or enter this code: {{ token }}</p>\n",
    ),
];

/// What a template is given.
pub struct Letter<'a> {
    /// The recipient (for an email change, the new address).
    pub to: &'a str,
    /// The account's address.
    pub email: &'a str,
    /// The link to follow.
    pub confirmation_url: &'a str,
    /// The one-time code.
    pub token: &'a str,
    /// Its hash (what the link carries).
    pub token_hash: &'a str,
    /// Where the link leads afterwards.
    pub redirect_to: &'a str,
    /// The account's `user_metadata`.
    pub data: &'a Json,
}

/// Sends the accounts' emails.
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    templates: minijinja::Environment<'static>,
    site_url: String,
}

impl Mailer {
    /// The mailer of `config` (`None` without `smtp_url`); templates are read now.
    pub fn new(config: &AccountsConfig, dir: &ConfigDir) -> anyhow::Result<Option<Mailer>> {
        if config.smtp_url.is_empty() {
            return Ok(None);
        }
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(&config.smtp_url)
            .context("accounts.smtp_url is not an SMTP URL (smtp://host:port, smtps://…)")?
            .timeout(Some(Duration::from_secs(10)))
            .build();
        let from: Mailbox = config.email_from.parse().with_context(|| {
            format!(
                "accounts.email_from {:?} is not a mailbox",
                config.email_from
            )
        })?;
        let mut templates = minijinja::Environment::new();
        for (name, built_in) in BUILT_IN {
            let text = if config.email_templates_dir.as_os_str().is_empty() {
                built_in.to_string()
            } else {
                let path = dir.resolve(&config.email_templates_dir.join(name));
                match std::fs::read_to_string(&path) {
                    Ok(text) => text,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => built_in.to_string(),
                    Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
                }
            };
            if !text.starts_with("Subject:") {
                anyhow::bail!("the email template {name} must begin with a line \"Subject: …\"");
            }
            templates
                .add_template_owned(name.to_string(), text)
                .with_context(|| format!("the email template {name}"))?;
        }
        Ok(Some(Mailer {
            transport,
            from,
            templates,
            site_url: config.site_url.clone(),
        }))
    }

    /// Sends `kind` as `letter` says.
    pub async fn send(&self, kind: Kind, letter: &Letter<'_>) -> anyhow::Result<()> {
        let rendered = self
            .templates
            .get_template(kind.template())
            .and_then(|t| {
                t.render(minijinja::context! {
                    confirmation_url => letter.confirmation_url,
                    token => letter.token,
                    token_hash => letter.token_hash,
                    site_url => self.site_url,
                    redirect_to => letter.redirect_to,
                    email => letter.email,
                    new_email => letter.to,
                    data => minijinja::Value::from_serialize(letter.data),
                })
            })
            .context("rendering the email")?;
        let (subject, body) = rendered.split_once('\n').unwrap_or((rendered.as_str(), ""));
        let subject = subject.trim_start_matches("Subject:").trim();
        let to: Mailbox = letter.to.parse().context("the recipient's address")?;
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(subject)
            .header(ContentType::TEXT_HTML)
            .body(body.to_string())
            .context("building the email")?;
        self.transport
            .send(message)
            .await
            .context("sending the email")?;
        Ok(())
    }
}
