from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "phantomhub.accounts"
    label = "accounts"
