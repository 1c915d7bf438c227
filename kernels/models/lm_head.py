"""What every family's model shares at its head: the lm_head weight (the embedding table when the
config ties them) and the logits through the lm_head region."""
from torch import nn


class LanguageModel(nn.Module):
    """Base of the families' models: `embed_tokens`, an optional `lm_head` and `config` are theirs."""

    @property
    def head_weight(self):
        """lm_head's [V, hidden] weight: the embedding table when the config ties them."""
        return self.embed_tokens if self.config.tie_word_embeddings else self.lm_head

    def logits(self, hidden, dispatch, case):
        """[M, V] logits in the activation dtype."""
        return dispatch("lm_head", case, None, hidden, self.head_weight)
