#!/bin/sh
# llmc_params.sh GCOMPILE GRAPH: the GPT-2 graph's parameters are llm.c's, in
# llm.c's checkpoint order with llm.c's shapes (124M config), and weight decay
# applies where llm.c applies it (wte, wpe, qkvw, attprojw, fcw, fcprojw),
# every other parameter `nodecay`.
set -eu
gc=$1 graph=$2
got=$("$gc" "$graph" --config gpt2_124M --emit ir |
      sed -n 's/^  %[0-9]* \([a-z0-9]*\): f32\(\[[0-9,]*\]\) param init=[^ ]*\( nodecay\)\{0,1\}\( [a-z]*=[^ ]*\| transposed\)* grad=.*/\1 \2\3/p')
want='wte [50304,768]
wpe [1024,768]
ln1w [12,768] nodecay
ln1b [12,768] nodecay
qkvw [12,2304,768]
qkvb [12,2304] nodecay
attprojw [12,768,768]
attprojb [12,768] nodecay
ln2w [12,768] nodecay
ln2b [12,768] nodecay
fcw [12,3072,768]
fcb [12,3072] nodecay
fcprojw [12,768,3072]
fcprojb [12,768] nodecay
lnfw [768] nodecay
lnfb [768] nodecay'
if [ "$got" != "$want" ]; then
    printf 'parameters (name, shape, decay) differ from llm.c:\n--- llm.c\n%s\n--- %s\n%s\n' "$want" "$graph" "$got"
    exit 1
fi
echo "ok: 16 parameters in llm.c's order and shapes, decay on the 6 matrices"
