/* corpus.c — the built-in training text, used when a program runs without
 * --data. Byte-level: each byte is one token, so it needs V >= 256. The essay
 * is original prose written for this project (plain ASCII, about 25 KB); it
 * is long enough for B*T+1 tokens at the tiny config and well beyond.
 * Generated from one text file, one source line per string, so no literal
 * comes near C's 4095-character limit.
 */
#include <stdlib.h>
#include <string.h>

#include "gc_runtime_internal.h"

static const char *const lines[] = {
    "On Compilers, Graphs and the Patient Work of Training\n",
    "\n",
    "A compiler is a machine for keeping promises. A programmer writes down "
    "what should happen, in a language chosen because it is easy to think in,"
    " and the compiler agrees to make exactly that happen on a machine that "
    "thinks in nothing but bits, registers and addresses. The promise is "
    "narrow and strict: the meaning of the program must survive the journey. "
    "Everything else, the speed, the size, the order in which things are "
    "done, is open to negotiation. Most of the craft of compiler writing "
    "lives in that space between what must stay the same and what may change.\n",
    "\n",
    "It helps to picture the journey as a series of rooms. In the first room "
    "the program is only a stream of characters. In the next it has become a "
    "stream of tokens, small labelled pieces such as names, numbers and "
    "punctuation. After that it is a tree that records how the pieces nest "
    "inside one another. Later still it is a graph of operations with edges "
    "that carry values from where they are made to where they are used. At "
    "the end it is text again, but text meant for an assembler or for another"
    " compiler further down the line. Each room has its own furniture, and "
    "each stage of the compiler knows how to move the program from one room "
    "to the next without losing anything that matters.\n",
    "\n",
    "The first stage, the lexer, is humble but important. It reads characters"
    " and groups them into tokens. It decides that the letters of a word "
    "belong together, that a run of digits is a number, that an arrow made of"
    " a dash and a greater-than sign is a single symbol rather than two. A "
    "good lexer also remembers where each token came from: the file, the line"
    " and the column. That small habit pays for itself many times over, "
    "because every later error message can point at the exact place in the "
    "source that caused it. A user who reads \"line 12, column 7: unknown "
    "dimension\" can fix the mistake in seconds. A user who reads \"invalid "
    "input\" may spend an afternoon.\n",
    "\n",
    "The parser takes the tokens and builds a tree. Grammars are usually "
    "written as rules, each rule naming a construct and describing the shapes"
    " it may take. A statement may be an assignment or a declaration; an "
    "expression may be a sum of products; a product may be a chain of factors"
    " joined by stars. Parser generators turn such rules into tables, and "
    "hand-written parsers turn them into small functions that call each "
    "other. Either way the result is the same: a tree whose shape mirrors the"
    " structure of the program. The parser should do as little else as "
    "possible. It is tempting to check types and sizes while parsing, but "
    "checks are easier to write, test and explain when they live in a "
    "separate pass that walks the finished tree with all of its locations "
    "intact.\n",
    "\n",
    "Once the tree exists, the compiler can begin to understand it. Names are"
    " resolved to the things they refer to. Numbers are given types. Shapes "
    "are inferred: if one tensor has four rows and sixty-four columns and "
    "another has sixty-four rows and two hundred fifty-six columns, their "
    "product has four rows and two hundred fifty-six columns, and a compiler "
    "can work that out once instead of leaving it for the running program to "
    "discover. When a shape does not fit, this is the moment to say so, "
    "clearly, with the location of the offending line and the two sizes that "
    "disagree.\n",
    "\n",
    "Trees are good for reading programs but awkward for transforming them. "
    "So most compilers lower the tree into an intermediate representation, a "
    "form designed for analysis and rewriting. For ordinary programs this is "
    "often a list of simple instructions grouped into blocks. For the "
    "programs that describe neural networks it is usually a graph: each node "
    "is an operation such as a matrix multiplication, an addition or a "
    "normalisation, and each edge is a tensor flowing from one operation to "
    "the next. The graph makes dependencies visible. An operation can run as "
    "soon as its inputs are ready, and two operations that do not depend on "
    "one another may run in either order.\n",
    "\n",
    "A neural network described this way is really two programs folded into "
    "one. The forward program computes a prediction and a loss from the "
    "inputs and the parameters. The backward program computes how the loss "
    "would change if each parameter were nudged a little, which is the "
    "gradient. Writing the backward program by hand is tedious and error "
    "prone, so a compiler for training derives it automatically. The method "
    "is called reverse mode automatic differentiation, and at heart it is a "
    "careful application of the chain rule. The compiler walks the forward "
    "graph from the loss back towards the inputs. For every operation it "
    "meets, it emits the operations that turn the gradient of the output into"
    " gradients of the inputs. A matrix product becomes two matrix products "
    "with transposed operands. An addition passes its gradient through "
    "unchanged. A softmax needs its own output to compute its gradient, so "
    "the forward value must be kept alive until the backward pass has used "
    "it.\n",
    "\n",
    "That last point matters more than it first appears. Every value that the"
    " backward pass needs must be stored somewhere between the moment it is "
    "computed and the moment it is last read. In a large model these stored "
    "activations can take far more memory than the parameters themselves. The"
    " compiler therefore has to think about time as well as space. It "
    "records, for every tensor, the first step at which it is written and the"
    " last step at which it is read. This interval is the tensor's lifetime. "
    "Two tensors whose lifetimes do not overlap can share the same bytes. A "
    "tensor that is only needed briefly can occupy memory that another tensor"
    " will reuse a moment later.\n",
    "\n",
    "Finding a good arrangement is a packing problem. Picture a long strip of"
    " memory drawn horizontally and the steps of the program drawn "
    "vertically. Each tensor is a rectangle: its width is its size in bytes, "
    "and its height is its lifetime. The task is to place every rectangle on "
    "the strip so that no two rectangles overlap, while keeping the strip as "
    "short as possible. There is a simple lower bound on the answer: at each "
    "step, add up the sizes of the tensors that are alive; the largest of "
    "these sums is the least memory any arrangement could use. A good planner"
    " comes within a percent or two of that bound. A careless one can waste a"
    " third of the memory and never notice.\n",
    "\n",
    "When the plan is finished, it can be checked independently. A checker "
    "does not need to know how the planner reasoned. It only needs to confirm"
    " that any two tensors that are alive at the same time occupy separate "
    "ranges of bytes, unless one of them was deliberately written in place "
    "over the other. Such a checker is short, easy to trust and worth running"
    " after every change to the planner. It turns a subtle class of bugs, "
    "where two values quietly overwrite each other, into a plain error at "
    "compile time.\n",
    "\n",
    "The promise that follows from a static plan is a pleasant one: the plan "
    "is the allocation. The training program asks the device for one block of"
    " memory per region, of exactly the size the plan states, and never asks "
    "again. Peak memory is known before the program runs. If a model does not"
    " fit in the memory that is available, the compiler can say so with "
    "numbers, and the user can choose a smaller batch or a different split "
    "before wasting an hour of machine time.\n",
    "\n",
    "Sometimes a model almost fits. Then the compiler has another tool: "
    "recomputation. Instead of storing an activation through the whole "
    "forward pass, the program can throw it away and compute it again during "
    "the backward pass, just before it is needed. This trades arithmetic for "
    "memory. Cheap operations such as additions and activation functions are "
    "good candidates, because recomputing them costs little. Expensive "
    "operations such as large matrix products are usually worth keeping. "
    "Choosing what to recompute is a search, and it is most honest when the "
    "planner itself is part of the search, so that every candidate choice is "
    "judged by the memory it really uses rather than by an estimate.\n",
    "\n",
    "Fusion is the other great source of speed. Many operations in a network "
    "read a tensor, do a small amount of arithmetic on each element and write"
    " another tensor of the same size. Run one after another, each of them "
    "pays the full cost of moving data to and from memory, and on modern "
    "hardware moving data is far more expensive than computing with it. A "
    "fused kernel does the whole chain in one pass: it reads each element "
    "once, applies every step of the arithmetic while the value sits in a "
    "register and writes the result once. Adding a bias and applying an "
    "activation, or adding a residual and normalising, are classic examples. "
    "The compiler finds such chains in the graph and replaces them with a "
    "single operation, keeping the meaning exactly the same.\n",
    "\n",
    "It is worth saying plainly why fusion belongs in the compiler and not in"
    " the model description. A person describing a network should be able to "
    "write it in small, obvious pieces: an embedding, a matrix product, an "
    "addition, a normalisation. If the description had to be written in terms"
    " of fused kernels, it would become harder to read and easier to get "
    "wrong, and every new fused kernel would require rewriting the models "
    "that might benefit from it. When fusion is a pass, the model stays "
    "simple and the performance improves for every model at once.\n",
    "\n",
    "After fusion and planning, the compiler fixes the final order of "
    "operations and emits code. For a processor this might be plain C with "
    "loops and calls to a linear algebra library. For a graphics card it "
    "might be code that launches kernels on a stream. In both cases the "
    "emitted program is mostly a list: call this kernel with these pointers, "
    "then that one with those. Each pointer is the base address of a region "
    "plus an offset chosen by the planner. The generated code is dull to "
    "read, and that is a virtue. Dull code is easy to check, and all of the "
    "cleverness has already been spent where it can be tested.\n",
    "\n",
    "Around that list of calls sits the training loop, and the training loop "
    "has its own quiet discipline. It begins by preparing the parameters. If "
    "the user supplies a checkpoint, the parameters are read from it, after "
    "checking that the file really describes a model of the same shape. "
    "Otherwise they are drawn at random from distributions the model "
    "description names: zeros for biases, ones for the gains of normalisation"
    " layers, small normally distributed values for weights. The random "
    "numbers come from a generator seeded by a number the user can choose, so"
    " that two runs with the same seed start from exactly the same place.\n",
    "\n",
    "Then the loop reads data. Text is turned into tokens, small integers "
    "that index a vocabulary. A batch is a rectangle of tokens: a few rows, "
    "each a window of consecutive tokens from the corpus. The inputs are the "
    "tokens in the window, and the targets are the same tokens shifted by one"
    " place, because the model's task is to predict each next token from the "
    "ones before it. The loop walks through the data in order, one window "
    "after another, and when it reaches the end it starts again from the "
    "beginning. Simple sequential reading has the great advantage of being "
    "reproducible: the same run sees the same batches in the same order every"
    " time.\n",
    "\n",
    "Each step of the loop has three phases. In the forward phase the model "
    "reads the batch and produces a loss, a single number that measures how "
    "surprised the model was by the targets. A model that guessed uniformly "
    "among two hundred fifty-six possible bytes would have a loss of about "
    "five and a half, the natural logarithm of two hundred fifty-six. A model"
    " that has learned something about the text will do better. In the "
    "backward phase the gradients are computed. In the optimizer phase the "
    "parameters are moved a small distance in the direction that should lower"
    " the loss.\n",
    "\n",
    "The optimizer most often used for models of this kind keeps two running "
    "averages for every parameter. The first is an average of recent "
    "gradients, a kind of momentum that smooths out the noise of individual "
    "batches. The second is an average of recent squared gradients, which "
    "estimates how large the gradient for that parameter usually is. Each "
    "parameter then moves by its smoothed gradient divided by the square root"
    " of its typical squared size. Parameters whose gradients are "
    "consistently small take relatively larger steps, and parameters whose "
    "gradients are wild take careful ones. Early in training the averages are"
    " biased towards zero, because they start at zero, so each is divided by "
    "a correction factor that fades as the steps go by. Weight decay pulls "
    "every decayed parameter gently towards zero on each step, which keeps "
    "the weights from growing without limit.\n",
    "\n",
    "All of this happens thousands of times, and small mistakes compound. A "
    "gradient that is slightly wrong will still often make the loss go down "
    "for a while, which is exactly what makes such mistakes dangerous. The "
    "loss curve looks healthy, the model seems to learn, and only much later "
    "does anyone notice that it learns more slowly than it should. For this "
    "reason the gradients of a training compiler deserve a test that does not"
    " rely on the loss going down.\n",
    "\n",
    "The classic test is the finite difference check. Pick a parameter. "
    "Increase it by a small amount and compute the loss. Decrease it by the "
    "same amount and compute the loss again. The difference between the two "
    "losses, divided by twice the step, approximates the derivative of the "
    "loss with respect to that parameter. Compare that estimate with the "
    "gradient the backward pass produced. If the compiler derived the "
    "backward program correctly, the two numbers agree closely. If it made a "
    "mistake, they usually disagree badly.\n",
    "\n",
    "The word closely hides real difficulty. Computers represent numbers with"
    " limited precision, and single precision floating point carries only "
    "about seven decimal digits. A loss of five point something is stored "
    "with an error in its seventh or eighth digit. When the step is tiny, the"
    " change in the loss is tiny too, and it can drown in that rounding "
    "noise. When the step is large, the estimate suffers from the curvature "
    "of the function, because the derivative is only the slope of the "
    "tangent, and the secant through two distant points can tilt away from "
    "it. The art is to choose a step that balances the two kinds of error, "
    "and to judge the comparison with a tolerance that respects the noise: a "
    "difference that is smaller than the noise itself says nothing either "
    "way, and should not count as a failure.\n",
    "\n",
    "A good checker also chooses its samples with care. A parameter whose "
    "gradient is exactly zero in this batch, such as the embedding of a token"
    " that never appears, gives a trivially perfect agreement and proves "
    "nothing. It is better to look at several candidates in each tensor and "
    "check the one with the largest gradient, and to spread the checks across"
    " every tensor so that no part of the backward program escapes "
    "inspection. And the checker itself must be tested: a deliberately broken"
    " gradient should make it fail, loudly, or else its passing means "
    "nothing.\n",
    "\n",
    "Determinism is the other great friend of anyone who tests numerical "
    "code. If two runs with the same seed and the same number of threads "
    "produce exactly the same losses, bit for bit, then any change in the "
    "losses after a code change is a real signal rather than noise. Achieving"
    " this takes some care. Sums must be computed in a fixed order, because "
    "floating point addition is not associative: adding the same numbers in a"
    " different order can give a slightly different result. Parallel "
    "reductions must split the work in the same way every time. Atomic "
    "additions, which finish in whatever order the hardware chooses, are "
    "avoided in code that must be reproducible. The reward is a program whose"
    " behaviour can be pinned down by a test that compares numbers exactly.\n",
    "\n",
    "Checkpoints give a training run a memory that outlives the process. At "
    "the end of training, or at chosen moments along the way, the program "
    "writes its parameters to a file. The file begins with a small header "
    "that records what kind of model it describes: the vocabulary size, the "
    "number of layers, the width of the hidden state, the length of the "
    "context window. A program that reads the file later checks every one of "
    "those numbers against its own, and refuses politely when they disagree, "
    "naming the field, its offset in the file and both values. A checkpoint "
    "that loads into the wrong model does not fail loudly by itself; it "
    "produces nonsense, and nonsense is much harder to diagnose than a clear "
    "refusal.\n",
    "\n",
    "Writing a checkpoint safely is a small lesson in the habits of careful "
    "systems. The program should never overwrite a good file with a "
    "half-written one. So it writes to a temporary file next to the real one,"
    " asks the operating system to push the bytes all the way to the disk, "
    "and only then renames the temporary file over the real name. A rename "
    "within one directory is atomic: anyone who looks at the file afterwards "
    "sees either the old version or the new one, never a mixture. If anything"
    " goes wrong along the way, the temporary file is removed and the error "
    "is reported, and the old checkpoint, if there was one, is left "
    "untouched.\n",
    "\n",
    "Error messages deserve the same care as the arithmetic. A training "
    "program reads files that other programs wrote, sometimes long ago and "
    "sometimes incorrectly. When a file is wrong, the most useful message "
    "names the file, the byte offset where the problem was found, what was "
    "found there and what was expected. A token shard whose header promises a"
    " thousand tokens but whose size allows only nine hundred should say so "
    "in those terms. A token whose value lies outside the vocabulary should "
    "be reported with its position, so that the user can find the tool that "
    "produced it. And in every case the program should stop cleanly with a "
    "nonzero status, instead of crashing or, worse, carrying on with garbage.\n",
    "\n",
    "There is a particular pleasure in watching a small model learn. At the "
    "first step its predictions are close to uniform, and the loss sits near "
    "the logarithm of the vocabulary size. Within a few dozen steps it "
    "discovers the most common letters, and the loss drops. Soon it learns "
    "that a space usually follows a word, that a capital letter often follows"
    " a full stop, that certain pairs of letters are common and others almost"
    " never occur. Sampling from it at that stage produces text that looks "
    "like a language seen through frosted glass: the rhythm of words and "
    "sentences without much meaning. Larger models trained for longer move "
    "from that rhythm to grammar, and from grammar to something that "
    "resembles sense.\n",
    "\n",
    "Sampling is itself a small loop worth understanding. The program keeps a"
    " window of recent tokens. It runs the forward pass, reads the predicted "
    "distribution for the next position, turns the raw scores into "
    "probabilities with a softmax, and draws one token at random according to"
    " those probabilities. The new token is appended to the window, and the "
    "process repeats. When the window is full, the oldest token falls off the"
    " left edge. Because the draw uses the same seeded generator as "
    "everything else, a sample can be reproduced exactly by running the "
    "program again with the same seed.\n",
    "\n",
    "It is tempting to think of the training loop as the boring part, the "
    "scaffolding around the interesting mathematics. In practice the "
    "scaffolding is where most real problems appear. Files are truncated by "
    "full disks. Data contains tokens from a different vocabulary. A flag is "
    "misspelled and silently ignored. A run that should take an hour takes a "
    "day because nobody noticed that the batch was loaded on every step from "
    "a slow disk. Good scaffolding turns each of these into a clear message "
    "or a visible number: a progress line per step with the loss, the time "
    "and the throughput, a log file that a script can read, a header that "
    "states what was compiled and how much memory it will use.\n",
    "\n",
    "The throughput line deserves a word of its own. Tokens per second is the"
    " number users care about, because it tells them how long their run will "
    "take. Model flops utilisation is the number engineers care about, "
    "because it tells them how close the program comes to the arithmetic "
    "limit of the hardware. It is computed by counting the floating point "
    "operations that one step really needs, dividing by the time the step "
    "took, and comparing with the peak rate of the device. A value of fifty "
    "percent on a modern accelerator is good; a value of five percent means "
    "that something, usually memory traffic or a badly shaped matrix product,"
    " is wasting most of the machine.\n",
    "\n",
    "All of these pieces share a common attitude. They assume that mistakes "
    "will happen and arrange for them to be caught early, close to their "
    "cause, with enough information to fix them. The lexer keeps locations so"
    " that the parser can complain precisely. The shape checker runs before "
    "any code is generated. The memory plan is checked by an independent "
    "pass. The gradients are checked against finite differences. The data "
    "files are checked byte by byte before the first step. The losses are "
    "compared exactly between runs. None of these checks is clever, and "
    "together they make a system that can be changed with confidence.\n",
    "\n",
    "A compiler for training is, in the end, a way of moving decisions "
    "earlier. Decisions about memory that would otherwise be made by an "
    "allocator at run time, under pressure and without foresight, are made by"
    " a planner that can see the whole program at once. Decisions about which"
    " operations to fuse, which values to keep and which to recompute, are "
    "made by passes that can be tested in isolation. What remains for the "
    "running program is to follow the plan: read the data, call the kernels "
    "in order, watch the loss, and write the results somewhere safe. When "
    "that division of labour works, the training program becomes predictable,"
    " and predictability is the foundation on which every faster, larger and "
    "more ambitious run is built.\n",
    "\n",
    "A Short Glossary\n",
    "\n",
    "Activation: a value computed during the forward pass, often kept for the"
    " backward pass.\n",
    "Arena: the region of memory that holds activations and their gradients, "
    "carved up by the planner.\n",
    "Batch: a group of token windows processed together in one step.\n",
    "Checkpoint: a file that holds the parameters of a model so that training"
    " or sampling can resume later.\n",
    "Fusion: replacing a chain of small operations with one kernel that reads"
    " and writes memory once.\n",
    "Gradient: the rate of change of the loss with respect to a parameter.\n",
    "Lifetime: the interval of steps between the first write of a tensor and "
    "its last read.\n",
    "Loss: a single number that measures how wrong the model's predictions "
    "were on a batch.\n",
    "Optimizer: the rule that turns gradients into changes of the parameters.\n",
    "Parameter: a number the model learns, such as an entry of a weight "
    "matrix.\n",
    "Recomputation: computing a value again instead of storing it, to save "
    "memory.\n",
    "Token: a small integer that stands for a piece of text, such as a byte "
    "or a word fragment.\n",
    "Vocabulary: the set of all tokens a model knows; its size fixes the "
    "width of the output layer.\n",
    "\n",
    "A Note on Small Experiments\n",
    "\n",
    "Large runs are expensive, and every mistake in them costs hours. Small "
    "experiments are cheap, and they catch most mistakes before the large "
    "runs begin. A tiny model with two layers, a narrow hidden state and a "
    "vocabulary of bytes can train on an ordinary laptop in seconds. It "
    "exercises the same compiler, the same planner, the same kernels and the "
    "same training loop as a model a thousand times larger. If its loss "
    "falls, if its gradients agree with finite differences, if two runs give "
    "identical numbers, and if a checkpoint written by one run loads into "
    "another, then a large part of the system has already been shown to work."
    " What remains for the large run is mostly a question of scale: more "
    "memory, more time, and the patience to wait for the numbers to come in.\n",
    "\n",
    "The same idea applies to the tests themselves. A good test suite runs in"
    " seconds, so that people run it often. It builds its own fixtures "
    "instead of depending on files that may drift. It checks failure paths as"
    " carefully as success paths, because a program that fails gracefully on "
    "bad input is a program that users can trust. And it says exactly what "
    "went wrong when it fails, so that the person reading the output can go "
    "straight to the cause. These habits are not glamorous, but they are what"
    " allows a small team to change a complex system every day without "
    "breaking it.\n",
    "\n",
    "Closing\n",
    "\n",
    "The next time a loss curve bends gently downwards on a screen, it is "
    "worth remembering how much had to go right for that curve to appear. "
    "Characters became tokens, tokens became a tree, the tree became a graph,"
    " the graph grew a backward half and an optimizer, its operations were "
    "fused and ordered, its tensors were packed into memory by a plan that "
    "was checked before it was trusted, and the result was written out as a "
    "program that reads data, calls kernels and writes checkpoints. Each of "
    "those steps is a small promise kept. The curve is what it looks like "
    "when all of them are kept at once.\n",
};

const char *gcrt_corpus(size_t *len)
{
    static char *text;
    static size_t n;
    if (!text) {
        size_t total = 0, k = sizeof lines / sizeof lines[0];
        for (size_t i = 0; i < k; i++)
            total += strlen(lines[i]);
        char *t = malloc(total + 1);
        if (!t) {
            *len = 0;
            return "";
        }
        for (size_t i = 0; i < k; i++) {
            size_t m = strlen(lines[i]);
            memcpy(t + n, lines[i], m);
            n += m;
        }
        t[n] = 0;
        text = t;
    }
    *len = n;
    return text;
}
