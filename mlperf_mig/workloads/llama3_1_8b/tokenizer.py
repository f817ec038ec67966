"""Tokenizers of the llama3.1-8b workload: a byte-level BPE made in-process for synthetic runs,
and a user's tokenizer.json for real weights.

The built-in tokenizer is trained with Hugging Face `tokenizers` (BpeTrainer, the ByteLevel
pre-tokenizer and decoder, as GPT-2 and Llama 3 are) on CORPUS, a fixed English text that ships
here as code: no download, and the same vocabulary (byte for byte the same JSON) in every process
and under every hash seed. Its vocabulary is `vocab_size` tokens: the 256 byte symbols, the
begin- and end-of-text tokens and the merges learnt from CORPUS. Like Llama 3.1's tokenizer it
puts the begin-of-text token before every encoded text, and decoding drops special tokens (as
the MLPerf scorer's `batch_decode(..., skip_special_tokens=True)` does).

`tokenizers` is imported only inside the functions that build or load a tokenizer.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from mlperf_mig._io import read_bounded
from mlperf_mig.errors import ModelFileError

__all__ = [
    "BOS_TOKEN",
    "CORPUS",
    "END_TOKENS",
    "EOS_TOKEN",
    "TOKENIZER_FILE",
    "VOCAB_SIZE",
    "TextTokenizer",
    "builtin_tokenizer",
    "check_vocabulary",
    "load_tokenizer",
]

logger = logging.getLogger(__name__)

VOCAB_SIZE = 1024  # the generated tiny model's vocabulary
TOKENIZER_FILE = "tokenizer.json"
BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|end_of_text|>"
# End-of-sequence tokens looked for in a user's tokenizer, in this order: Llama 3.1 Instruct ends
# a turn with <|eot_id|> (its generation config also stops at the other two), older families
# with </s>, <eos> or <|endoftext|>.
END_TOKENS = ("<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", "</s>", "<eos>", "<|endoftext|>")
# Llama 3.1's tokenizer.json is about 9 MB; anything far larger is not a tokenizer.
MAX_TOKENIZER_BYTES = 64 << 20

# The training text of the built-in tokenizer: plain news-style English written for this
# project (one paragraph per line), with the words the synthetic articles are built from
# (cnn_dailymail.py) and the MLPerf prompt's own wording.
CORPUS = """\
Summarize the following news article in 128 tokens. Please output the summary only, without any other text.
Article: The city council voted on Tuesday to approve a new budget for the coming year, after a long debate about schools, roads and public health.
The mayor said the plan would add 250 teachers, repair 40 bridges and open three new clinics before the end of the summer.
Critics argued that the budget relied on higher property taxes, which they said would hurt families who are already struggling with rising prices.
Police said a man was arrested on Sunday night after a car crashed into a shop window in the centre of the town. No one was seriously injured.
Witnesses told reporters that the driver had been travelling at high speed and appeared to lose control near the railway station.
The national weather service warned of heavy rain and strong winds across the northern region, with flooding expected in several low-lying areas.
Emergency teams were moving sandbags and pumps into villages along the river, and officials urged residents to stay at home if they could.
Scientists have discovered a new species of frog in the rainforest, a small green animal that sings at night and lives high in the trees.
The research team, led by a university professor, spent two years studying the forest and recorded more than 300 hours of sound.
"This is a remarkable find," she said. "It shows how much we still have to learn about the plants and animals that share our planet."
The company reported a profit of $4.2 billion for the third quarter, beating the forecasts of most analysts, as sales of its phones and computers grew.
Shares rose by 6 per cent in early trading on Wednesday, and the chief executive told investors that demand remained strong in Europe and Asia.
The football club confirmed that its captain would miss the rest of the season with a knee injury suffered during Saturday's match against its rivals.
The manager said the team would miss his leadership, but he was confident that younger players were ready to step forward and win games.
Thousands of people marched through the capital on Friday to call for better pay and working conditions for nurses, doctors and hospital staff.
The health minister promised to meet union leaders next week, and said the government was committed to reducing waiting times for patients.
A fire destroyed a historic theatre in the old quarter of the city early on Monday morning. Firefighters fought the flames for more than five hours.
The building, which opened in 1895, had recently been restored with money raised by local families, artists and businesses.
The airline announced that it would cancel hundreds of flights over the holiday weekend because of a shortage of pilots and cabin crew.
Passengers were offered refunds or seats on other flights, but many said they had been given little notice and were left stranded at airports.
The court ruled that the former minister must stand trial on charges of fraud and corruption related to contracts worth millions of dollars.
His lawyers said he denied all the allegations and would prove his innocence, while prosecutors said they had gathered strong evidence.
A new study suggests that regular exercise and a healthy diet can reduce the risk of heart disease by almost a third in adults over 50.
Researchers followed 12,000 people for ten years and found that those who walked every day were less likely to suffer a stroke.
The president travelled to the border on Thursday to meet soldiers and local leaders, and to discuss security, trade and migration.
Officials from both countries signed an agreement to build a new bridge and to share information about crime and smuggling.
Heavy snow closed schools and roads across the mountains, and thousands of homes were left without electricity for two days.
Engineers worked through the night to restore power, and the energy company apologised to customers for the long delays.
The museum will open a major exhibition next month featuring paintings, photographs and letters from the early twentieth century.
Visitors will be able to see works that have never been shown in public before, including a portrait of the artist's mother.
The government said unemployment fell to its lowest level in a decade, as employers in construction, retail and technology hired more workers.
Economists warned, however, that wages were not keeping pace with inflation and that many households were still under pressure.
Rescue workers pulled a young girl from the rubble of a collapsed building two days after an earthquake struck the coastal region.
Aid agencies said food, water and shelter were urgently needed for families whose homes had been damaged or destroyed.
The tennis champion won her fourth title of the year on Sunday, defeating her opponent in three sets after more than two hours of play.
"I'm so happy and proud of my team," she told the crowd. "We worked very hard for this, and I want to thank everyone who supported me."
Police are appealing for information after a valuable painting was stolen from a private collection in a house outside the city.
Detectives believe the thieves entered through a rear window during the night and escaped in a dark van that was later found burned.
The space agency launched a rocket carrying a satellite that will study the oceans and measure changes in sea levels and temperatures.
The mission is expected to last at least five years and will send data to scientists around the world every day.
Farmers said the dry weather had damaged crops across the south, and prices of wheat, corn and vegetables were likely to rise this autumn.
The agriculture minister announced emergency support for farmers, including loans, tax relief and help with feeding their animals.
A passenger train derailed near a small town on Wednesday evening, injuring 17 people, two of them seriously, according to local officials.
Investigators were examining the track and the signals to find out what caused the accident, and services on the line were suspended.
The singer announced a world tour that will begin in London in March and visit 30 cities, including New York, Paris, Tokyo and Sydney.
Tickets sold out within minutes, and fans complained online that prices on resale websites had climbed to several times their original value.
The school board decided to extend the school day by thirty minutes to give pupils more time for reading, science and mathematics.
Parents were divided over the change, with some welcoming extra lessons and others worried about longer days for younger children.
Doctors at the hospital carried out a rare operation to separate twin babies, a procedure that took more than twelve hours to complete.
The hospital said both children were recovering well, and thanked the surgeons, nurses and staff who had prepared for months.
The report found that air pollution in large cities had improved over the past decade, but remained above safe levels in many areas.
Campaigners called for more cycle lanes, cleaner buses and tighter limits on older vehicles entering the centre of the city.
An election will be held in the spring after the prime minister lost a vote in parliament and asked the king to dissolve it.
Opinion polls suggest a close race between the two main parties, with voters most concerned about the economy, housing and health care.
The bank raised interest rates by a quarter of a percentage point, its sixth increase this year, in an effort to slow rising prices.
Homeowners with mortgages will face higher monthly payments, while savers may see better returns on their accounts.
Volunteers planted more than 10,000 trees in a single weekend as part of a project to restore a forest damaged by fire last year.
Organisers said they hoped the new trees would protect wildlife, prevent soil erosion and give local people a place to walk and relax.
The technology firm unveiled a new model of its electric car, which it said could travel more than 500 kilometres on a single charge.
The vehicle will go on sale next year, and the company expects to build 200,000 of them at its factory in the north of the country.
According to the police, the suspect was a 34-year-old man from the area who had been known to officers for several months.
He was due to appear in court on Monday, charged with robbery, assault and possession of a weapon.
Officials said the investigation was continuing and asked anyone with information to contact them by phone or online.
It was not immediately clear why the decision was made, and a spokesman declined to comment when contacted by reporters.
Experts say the findings could help doctors treat patients earlier, but they caution that more research is needed before any changes are made.
Summary: The council approved the budget. Police arrested a driver. Scientists found a new frog. The company beat forecasts.
"""


@attrs.frozen(kw_only=True, eq=False)
class TextTokenizer:
    """A Hugging Face tokenizer with what the workload needs of it: encode a prompt into int32
    ids (begin-of-text first where the tokenizer adds one), decode ids into text without the
    special tokens, and the ids that end a generation."""

    backend: Any = attrs.field(repr=False)  # tokenizers.Tokenizer
    source: str
    eos_ids: tuple[int, ...]

    @property
    def eos_id(self) -> int:
        """The end-of-sequence id a generation stops at first (and TEST06 counts)."""
        return self.eos_ids[0]

    @property
    def vocab_size(self) -> int:
        """Ids this tokenizer can produce: its vocabulary and its added (special) tokens."""
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> np.ndarray:
        """The int32 token ids of `text`, with the special tokens the tokenizer adds."""
        return np.asarray(self.backend.encode(text).ids, dtype=np.int32)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """The text of `ids`, special tokens (begin, end) left out."""
        return str(self.backend.decode([int(i) for i in ids], skip_special_tokens=True))

    def to_json(self) -> str:
        """The tokenizer as Hugging Face's tokenizer.json text."""
        return str(self.backend.to_str())


def _train(vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS_TOKEN, EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A", special_tokens=[(BOS_TOKEN, tokenizer.token_to_id(BOS_TOKEN))]
    )
    return tokenizer


@functools.cache
def builtin_tokenizer(vocab_size: int = VOCAB_SIZE) -> TextTokenizer:
    """The in-process byte-level BPE of `vocab_size` tokens, trained on CORPUS once per process;
    ValueError when CORPUS cannot give that many."""
    if vocab_size <= 258:
        raise ValueError(
            f"vocab_size {vocab_size} leaves no room for merges: a byte-level BPE has 256 byte "
            "symbols and 2 special tokens; pass more than 258"
        )
    backend = _train(vocab_size)
    size = int(backend.get_vocab_size(with_added_tokens=True))
    if size != vocab_size:
        raise ValueError(
            f"the built-in corpus gives a {size}-token vocabulary, not {vocab_size}; pass "
            f"vocab_size at most {size}, or a tokenizer file"
        )
    return TextTokenizer(
        backend=backend,
        source=f"built-in byte-level BPE ({vocab_size} tokens)",
        eos_ids=(int(backend.token_to_id(EOS_TOKEN)),),
    )


def _read_tokenizer_text(path: Path, limit: int) -> str:
    """The UTF-8 text of the user's tokenizer file `path` (a link is followed: the user named
    it, and a Hugging Face cache links its files), at most `limit` bytes."""

    def refused(reason: str) -> ModelFileError:
        return ModelFileError(
            f"tokenizer {str(path)!r} {reason}; pass the model's {TOKENIZER_FILE} or the "
            "folder holding it"
        )

    try:
        data = read_bounded(
            path, limit, lambda why: refused(f"is {why}"), kind=TOKENIZER_FILE, follow_links=True
        )
    except FileNotFoundError:
        raise refused("does not exist") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refused(f"is not UTF-8 text (byte {exc.start})") from None


def load_tokenizer(path: str | os.PathLike[str]) -> TextTokenizer:
    """The tokenizer of a tokenizer.json file, or of the folder holding one (a model folder);
    ModelFileError, in one line, when it is missing, unreadable, not a tokenizer or has no
    end-of-sequence token."""
    from tokenizers import Tokenizer

    file = Path(path)
    if file.is_dir():
        file = file / TOKENIZER_FILE
    text = _read_tokenizer_text(file, MAX_TOKENIZER_BYTES)
    try:
        backend = Tokenizer.from_str(text)
    except Exception as exc:  # the Rust side raises plain Exception with serde's message
        reason = " ".join(str(exc).split())[:200]
        raise ModelFileError(
            f"tokenizer {str(file)!r} is not a Hugging Face tokenizer.json ({reason}); pass the "
            "tokenizer.json that came with the model"
        ) from None
    vocab = backend.get_vocab(with_added_tokens=True)
    eos_ids = tuple(int(vocab[token]) for token in END_TOKENS if token in vocab)
    if not eos_ids:
        raise ModelFileError(
            f"tokenizer {str(file)!r} has no end-of-sequence token (expected one of "
            f"{', '.join(END_TOKENS)}); pass the tokenizer.json that came with the model"
        )
    return TextTokenizer(backend=backend, source=str(file), eos_ids=eos_ids)


def check_vocabulary(tokenizer: TextTokenizer, vocab_size: int) -> None:
    """Refuse, in one line, a tokenizer whose ids are not exactly the model's vocabulary (a
    tokenizer of another model family would feed ids the model never learnt, or past its
    embedding table)."""
    if tokenizer.vocab_size != vocab_size:
        raise ModelFileError(
            f"tokenizer {tokenizer.source} has {tokenizer.vocab_size} tokens but the model's "
            f"vocabulary has {vocab_size}; pass the tokenizer.json that came with the model"
        )
